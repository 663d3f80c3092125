"""Progress on stderr: a tqdm bar with rate and ETA per stage (plain ETA lines without tqdm)."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class PlainProgress:
    """Minimal tqdm stand-in: one status line with rate and ETA every ``interval`` seconds."""

    def __init__(self, total: int, initial: int, desc: str, interval: float = 10.0):
        self.total, self.initial, self.count, self.desc = total, initial, initial, desc
        self.interval, self.last_print, self.postfix = interval, 0.0, ""
        self.started = time.monotonic()

    def eta_text(self) -> str:
        done = self.count - self.initial
        elapsed = time.monotonic() - self.started
        if done <= 0 or elapsed <= 0:
            return "ETA ?"
        rate = done / elapsed
        return f"{rate:.2f} step/s, ETA {format_duration((self.total - self.count) / rate)}"

    def update(self, n: int = 1) -> None:
        self.count += n
        if time.monotonic() - self.last_print >= self.interval or self.count >= self.total:
            self.last_print = time.monotonic()
            print(f"{self.desc}: {self.count}/{self.total} {self.eta_text()} {self.postfix}",
                  file=sys.stderr, flush=True)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        pass


def progress_bar(total: int, initial: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainProgress(total, initial, desc)
    # ascii + a slow refresh keep log files (nohup) readable; the ETA is
    # computed from this session's steps only, so it is right after a resume.
    return tqdm(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr, ascii=True,
                mininterval=5.0, dynamic_ncols=False, ncols=110, smoothing=0.05)


def log(message: str) -> None:
    """Stage announcements of the build script."""
    print(f"[demo-training] {message}", file=sys.stderr, flush=True)


def log_plan(config) -> None:
    """What the run will do, so the first ETA can be put in context."""
    for name, schedule in (("target", config.target_schedule), ("draft", config.draft_schedule)):
        tokens = schedule.steps * schedule.batch_size * config.block_size
        log(f"plan: {name} {schedule.steps} steps x {schedule.batch_size} blocks of {config.block_size} "
            f"tokens = {tokens / 1e6:.1f}M tokens")
