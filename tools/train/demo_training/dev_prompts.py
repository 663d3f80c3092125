"""Development prompts: starts of the corpus's held-out documents, for choosing decoding settings.

The held-out prompt set (``heldout_prompts.json``) is for reporting only; a setting such as the family's
suggested repetition penalty is chosen on these instead, then reported on the held-out set.

    python -m tools.train.demo_training.dev_prompts OUT.json [--per-domain 10]

A code prompt is a top-level ``def``/``class`` line with up to two lines after it, ending before a newline (as
the held-out code prompts do); a prose prompt is a paragraph's first ~120 characters, cut at a word.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from .corpus import Document, split_documents

PROSE_CHARACTERS = 120
MIN_PARAGRAPH = 200


def code_prompt(document: Document) -> str | None:
    """The first top-level definition with a body line or two, or None."""
    lines = document.text.split("\n")
    for i, line in enumerate(lines):
        if re.match(r"(def|class) \w", line):
            return "\n".join(lines[i:i + 3])
    return None


def prose_prompt(document: Document) -> str | None:
    """The start of the first paragraph long enough to continue, cut after a word, or None."""
    for paragraph in document.text.split("\n\n"):
        flat = " ".join(paragraph.split())
        if len(flat) >= MIN_PARAGRAPH:
            return flat[:flat.rfind(" ", 0, PROSE_CHARACTERS)]
    return None


def evenly(items: list, count: int) -> list:
    """`count` items spread over the list, first and last included."""
    if len(items) <= count:
        return items
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


def dev_prompts(code: list[Document], prose: list[Document], per_domain: int) -> list[dict]:
    prompts = []
    for domain, documents, make in (("code", code, code_prompt), ("prose", prose, prose_prompt)):
        found = [(d, text) for d in documents if (text := make(d))]
        prompts += [{"id": f"{domain}-{d.name}", "domain": domain, "text": text}
                    for d, text in evenly(found, per_domain)]
    return prompts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-domain", type=int, default=10)
    parser.add_argument("--prose-source", default="docs")
    args = parser.parse_args(argv)
    split = split_documents(None, None, args.prose_source, None)
    prompts = dev_prompts(split.heldout_code, split.heldout_prose, args.per_domain)
    args.out.write_text(json.dumps({"about": __doc__.split("\n\n")[0], "prompts": prompts}, indent=1))
    print(f"{len(prompts)} prompts -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
