"""The training corpus, offline: the running interpreter's standard library and its documentation.

Code comes from the stdlib ``*.py`` files. Prose comes from one of two
sources (``RunConfig.prose_source``):

- ``"pydoc"``: ``pydoc_data.topics``, the language reference rendered as
  plain text, always present (the v1 family and ``--quick``);
- ``"docs"``: the installed Python documentation (tutorial, library
  reference, language reference, HOWTOs, FAQ; see ``python_docs``), about 20
  times more prose. The pydoc topics are generated from the language
  reference, so they are not added again.

All of it is under the PSF licence (see ``LICENSE.txt`` in the stdlib folder);
``SOURCE_LICENCES`` records it per source for the model card. The held-out
split is chosen by a hash of each document's name, so it is the same on every
run and independent of the training seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import sysconfig
from pathlib import Path

from .document import Document

# Folders skipped: tests and IDLE are large and atypical; encodings is mostly
# codec lookup tables; site-packages is not the stdlib; pydoc_data is the
# prose source and would otherwise be read twice as "code".
EXCLUDED_FOLDERS = frozenset(
    {"test", "tests", "idlelib", "encodings", "site-packages", "pydoc_data", "__pycache__"}
)
EXCLUDED_PREFIXES = ("_sysconfigdata", "config-")
CODE_HELDOUT_PERCENT = 5
# Prose has only ~80 topics, so a larger share is held out to get enough text.
PROSE_HELDOUT_PERCENT = 12
# The documentation has ~380 pages: 6 % holds out ~20 of them.
DOCS_HELDOUT_PERCENT = 6
PROSE_SOURCES = ("pydoc", "docs")
SOURCE_LICENCES = {
    "stdlib code": "PSF License Agreement (Python Software Foundation License Version 2)",
    "pydoc topics": "PSF License Agreement (Python Software Foundation License Version 2)",
    "Python documentation": ("PSF License Agreement (Python Software Foundation License Version 2); "
                             "code examples in the documentation also under the Zero-Clause BSD licence"),
}


@dataclasses.dataclass(frozen=True)
class CorpusSplit:
    """Training documents and the two held-out evaluation sets."""

    train: list[Document]
    heldout_code: list[Document]
    heldout_prose: list[Document]


def stdlib_root() -> Path:
    """Folder of the running interpreter's pure-Python standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def python_version() -> str:
    return ".".join(str(part) for part in sys.version_info[:3])


def is_included_source(relative: Path) -> bool:
    if any(part in EXCLUDED_FOLDERS for part in relative.parts[:-1]):
        return False
    return not any(part.startswith(EXCLUDED_PREFIXES) for part in relative.parts)


def code_documents() -> list[Document]:
    """All included stdlib sources, sorted by path for determinism."""
    root = stdlib_root()
    documents = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if not is_included_source(relative):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        documents.append(Document(relative.as_posix(), "code", text))
    return documents


def prose_documents() -> list[Document]:
    """The language-reference topics shipped with pydoc, sorted by key."""
    from pydoc_data.topics import topics

    return [Document(f"pydoc:{key}", "prose", topics[key]) for key in sorted(topics)]


def prose_for(source: str, docs_dir: Path | None = None) -> tuple[list[Document], int]:
    """Prose documents of ``source`` and the share of them held out (percent)."""
    if source == "pydoc":
        return prose_documents(), PROSE_HELDOUT_PERCENT
    if source == "docs":
        from .python_docs import docs_documents

        return docs_documents(docs_dir), DOCS_HELDOUT_PERCENT
    raise ValueError(f"unknown prose source {source!r}; expected one of {PROSE_SOURCES}")


def source_licences(prose_source: str) -> dict[str, str]:
    """Licence of every source the corpus draws on, for the model card."""
    prose = "pydoc topics" if prose_source == "pydoc" else "Python documentation"
    return {name: SOURCE_LICENCES[name] for name in ("stdlib code", prose)}


def docs_version_of(prose_source: str, docs_dir: Path | None) -> str | None:
    if prose_source != "docs":
        return None
    from .python_docs import docs_version

    return docs_version(docs_dir)


def is_heldout(name: str, percent: int) -> bool:
    """Stable hash split: the same names are held out on every machine."""
    bucket = int(hashlib.sha1(name.encode()).hexdigest(), 16) % 100
    return bucket < percent


def split_documents(
    max_code: int | None = None, max_prose: int | None = None,
    prose_source: str = "pydoc", docs_dir: Path | None = None,
) -> CorpusSplit:
    """Split code and prose by name; optionally keep only the first few of each."""
    code = code_documents()
    prose, prose_percent = prose_for(prose_source, docs_dir)
    train_code = [d for d in code if not is_heldout(d.name, CODE_HELDOUT_PERCENT)]
    train_prose = [d for d in prose if not is_heldout(d.name, prose_percent)]
    heldout_code = [d for d in code if is_heldout(d.name, CODE_HELDOUT_PERCENT)]
    heldout_prose = [d for d in prose if is_heldout(d.name, prose_percent)]
    return CorpusSplit(
        train=train_code[:max_code] + train_prose[:max_prose],
        heldout_code=heldout_code[: max_code and max(2, max_code // 8)],
        heldout_prose=heldout_prose[: max_prose and max(1, max_prose // 2)],
    )


def corpus_summary(split: CorpusSplit, prose_source: str = "pydoc", docs_dir: Path | None = None) -> dict:
    """Document and character counts, for the model card."""

    def stats(documents: list[Document]) -> dict:
        return {"documents": len(documents), "characters": sum(len(d.text) for d in documents)}

    return {
        "python_version": python_version(),
        "prose_source": prose_source,
        "licences": source_licences(prose_source),
        "docs_version": docs_version_of(prose_source, docs_dir),
        "train_code": stats([d for d in split.train if d.domain == "code"]),
        "train_prose": stats([d for d in split.train if d.domain == "prose"]),
        "heldout_code": stats(split.heldout_code),
        "heldout_prose": stats(split.heldout_prose),
        "heldout_code_names": [d.name for d in split.heldout_code],
        "heldout_prose_names": [d.name for d in split.heldout_prose],
    }
