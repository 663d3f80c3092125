"""Plain-text progress bars on stderr (tqdm when installed)."""

from __future__ import annotations

import sys
import time


class PlainProgress:
    """Minimal tqdm stand-in: one status line every ``interval`` seconds."""

    def __init__(self, total: int, initial: int, desc: str, interval: float = 10.0):
        self.total, self.count, self.desc = total, initial, desc
        self.interval, self.last_print, self.postfix = interval, 0.0, ""

    def update(self, n: int = 1) -> None:
        self.count += n
        if time.monotonic() - self.last_print >= self.interval or self.count >= self.total:
            self.last_print = time.monotonic()
            print(f"{self.desc}: {self.count}/{self.total} {self.postfix}", file=sys.stderr, flush=True)

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        pass


def progress_bar(total: int, initial: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainProgress(total, initial, desc)
    # ascii + a slow refresh keep log files (nohup) readable.
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, ascii=True,
                mininterval=5.0, dynamic_ncols=False, ncols=100)


def log(message: str) -> None:
    """Stage announcements of the build script."""
    print(f"[demo-training] {message}", file=sys.stderr, flush=True)
