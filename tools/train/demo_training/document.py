"""The unit the corpus is made of, on its own so that the corpus and its sources (python_docs) can both use it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Document:
    """One unit of the corpus: a source file or a reference topic."""

    name: str
    domain: str  # "code" or "prose"
    text: str
