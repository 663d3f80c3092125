"""Prose from the installed Python documentation (tutorial, library, reference, HOWTOs).

Read offline from the HTML documentation a distribution installs, e.g.
Debian's ``python3.11-doc`` (``/usr/share/doc/python3.11/html``). The reST
sources Sphinx copies next to the HTML (``_sources/**/*.rst.txt``) are
preferred: they are the text without navigation. Without them, the text of
each HTML page's main content is extracted with the standard library's
``html.parser``. Markup is reduced to what a reader of the rendered page sees.

The documentation is distributed under the PSF License Agreement (Python
Software Foundation License Version 2); since Python 3.8.6 the code examples,
recipes and other code in it are also available under the Zero-Clause BSD
licence. See ``license.html`` in the same folder.
"""

from __future__ import annotations

import html.parser
import os
import re
import sys
from pathlib import Path

from .document import Document

# Sections kept: the reader-facing prose. c-api and extending are about C;
# distutils is deprecated; whatsnew is mostly lists of changes and names.
INCLUDED_SECTIONS = ("tutorial", "library", "reference", "howto", "faq", "using", "glossary", "installing")
DOCS_LICENCE = ("PSF License Agreement (Python Software Foundation License Version 2); "
                "code examples in the documentation also under the Zero-Clause BSD licence")
DOCS_DIR_ENVIRONMENT = "SPEC_PLAYGROUND_PYTHON_DOCS"


class PythonDocsMissing(RuntimeError):
    """The documentation is not installed where the corpus looks for it."""


def docs_package() -> str:
    """Debian/Ubuntu package with the running interpreter's documentation."""
    return f"python{sys.version_info.major}.{sys.version_info.minor}-doc"


def default_docs_dir() -> Path:
    """``$SPEC_PLAYGROUND_PYTHON_DOCS`` or the Debian location for this Python."""
    override = os.environ.get(DOCS_DIR_ENVIRONMENT)
    if override:
        return Path(override)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Path(f"/usr/share/doc/python{version}/html")


def missing_message(folder: Path) -> str:
    return (f"The Python documentation was not found in {folder}. Install it with\n"
            f"    sudo apt-get install {docs_package()}\n"
            f"(Debian/Ubuntu), or point {DOCS_DIR_ENVIRONMENT} or --docs-dir at a folder holding the "
            "HTML documentation (with or without its _sources/ folder), e.g. the unpacked "
            "'python-3.x-docs-html' archive from docs.python.org.")


def is_included_page(relative: str) -> bool:
    """Keep pages of the reader-facing sections ('glossary' is a single page)."""
    first = relative.split("/", 1)[0]
    return first.removesuffix(".rst.txt").removesuffix(".txt").removesuffix(".html") in INCLUDED_SECTIONS


def page_name(relative: str) -> str:
    """``library/os.rst.txt`` and ``library/os.html`` both become ``docs:library/os``."""
    for suffix in (".rst.txt", ".txt", ".html"):
        if relative.endswith(suffix):
            return "docs:" + relative[: -len(suffix)]
    return "docs:" + relative


# ---------------------------------------------------------------- reST sources

ROLE = re.compile(r":(?:[a-z]+:)?([a-z-]+):`([^`]+)`")
NUMBERED_ROLES = {"pep": "PEP", "rfc": "RFC"}
LITERAL = re.compile(r"``([^`]+)``")
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_.:])\1{2,}\s*$")
DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([a-zA-Z:-]+)::\s*(.*)$")
COMMENT_OR_LABEL = re.compile(r"^\s*\.\.(\s|$)")
GRID_BORDER = re.compile(r"^\s*\+[-=+]+\+\s*$")
OPTION = re.compile(r"^\s+:[a-zA-Z -]+:(\s.*)?$")
SIGNATURES = frozenset({"function", "class", "method", "attribute", "data", "exception", "decorator",
                        "classmethod", "staticmethod", "opcode", "cmdoption", "option", "envvar",
                        "describe", "abstractmethod", "coroutinefunction", "coroutinemethod",
                        "decoratormethod", "pdbcommand", "productionlist"})
DROPPED = frozenset({"index", "highlight", "toctree", "testsetup", "testcleanup", "sectionauthor",
                     "moduleauthor", "module", "currentmodule", "tabularcolumns", "raw", "only",
                     "include", "literalinclude", "audit-event", "audit-event-table", "impl-detail",
                     "availability", "image", "figure", "miscnews", "program", "c:function"})
ADMONITIONS = {"note": "Note:", "warning": "Warning:", "seealso": "See also:", "important": "Important:",
               "versionadded": "New in version", "versionchanged": "Changed in version",
               "deprecated": "Deprecated since version", "caution": "Caution:", "tip": "Tip:",
               "hint": "Hint:", "attention": "Attention:", "danger": "Danger:", "admonition": ""}


def role_text(match: re.Match) -> str:
    """``:func:`~os.path.join``` -> ``join``; ``:ref:`text <label>``` -> ``text``."""
    role, text = match.group(1), match.group(2)
    if role in NUMBERED_ROLES:
        return f"{NUMBERED_ROLES[role]} {text.split('#')[0]}"
    explicit = re.match(r"^(.*?)\s*<[^>]*>$", text, re.S)
    if explicit and explicit.group(1):
        return explicit.group(1)
    text = text.lstrip("!")
    if text.startswith("~"):
        return text[1:].rsplit(".", 1)[-1]
    return text


def inline_markup(line: str) -> str:
    return LITERAL.sub(r"\1", ROLE.sub(role_text, line))


def indentation(line: str) -> int:
    return len(line) - len(line.lstrip())


def skip_block(lines: list[str], start: int, indent: int) -> int:
    """Index after the indented body (and blank lines) following line ``start``."""
    index = start + 1
    while index < len(lines) and (not lines[index].strip() or indentation(lines[index]) > indent):
        index += 1
    return index


def skip_paragraph(lines: list[str], start: int) -> int:
    """Index of the first blank line at or after ``start``."""
    index = start
    while index < len(lines) and lines[index].strip():
        index += 1
    return index


def directive_line(name: str, argument: str, indent: str) -> str | None:
    """What a directive's first line becomes in plain text (None: dropped)."""
    if name in SIGNATURES or name.startswith(("py:", "c:")):
        return indent + ("@" + argument if name == "decorator" else argument) if argument else None
    if name in ADMONITIONS:
        return indent + " ".join(part for part in (ADMONITIONS[name], argument) if part)
    return None  # code-block, doctest, testcode, ...: keep the body only


def rest_to_text(source: str) -> str:
    """Reduce reST to the text a reader of the rendered page sees."""
    lines = inline_markup(source).splitlines()  # roles may span lines
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        directive = DIRECTIVE.match(line)
        if directive:
            indent, name, argument = directive.groups()
            if name in DROPPED:
                index = skip_block(lines, index, len(indent))
                continue
            text = directive_line(name, argument, indent)
            if text is not None:
                out.append(text)
            index += 1
            while index < len(lines) and OPTION.match(lines[index]):
                index += 1
            continue
        if COMMENT_OR_LABEL.match(line):  # comments, labels, substitutions
            index = skip_block(lines, index, indentation(line))
            continue
        if GRID_BORDER.match(line):  # grid tables are layout, not text
            index = skip_paragraph(lines, index)
            continue
        if not UNDERLINE.match(line):
            out.append(plain_line(line))
        index += 1
    return squeeze_blank_lines("\n".join(out))


def plain_line(line: str) -> str:
    """A paragraph's literal-block marker ``::`` becomes ``:``."""
    if line.strip() == "::":
        return ""
    return line[:-1] if line.endswith("::") else line


def squeeze_blank_lines(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


# ---------------------------------------------------------------------- HTML

BLOCK_TAGS = frozenset({"p", "div", "section", "pre", "li", "dt", "dd", "tr", "h1", "h2", "h3", "h4",
                        "h5", "h6", "table", "ul", "ol", "dl", "blockquote", "br"})
SKIPPED_TAGS = frozenset({"script", "style", "nav", "head"})
SKIPPED_CLASSES = frozenset({"headerlink", "sphinxsidebar", "related", "footer", "clearer",
                             "copybutton", "mobile-nav", "breadcrumbs"})


class MainTextExtractor(html.parser.HTMLParser):
    """Text of the ``role="main"`` element, without navigation or scripts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, skipping, in main)
        self.pre_depth = 0

    def inside(self) -> tuple[bool, bool]:
        return (self.stack[-1][1], self.stack[-1][2]) if self.stack else (False, False)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        skipping, in_main = self.inside()
        classes = set((attributes.get("class") or "").split())
        skipping = skipping or tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES)
        in_main = in_main or attributes.get("role") == "main"
        if tag in ("br", "img", "meta", "link", "input", "hr"):
            if tag == "br" and in_main and not skipping:
                self.parts.append("\n")
            return
        self.stack.append((tag, skipping, in_main))
        self.pre_depth += tag == "pre"
        if tag in BLOCK_TAGS and in_main and not skipping:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        while self.stack:
            popped, skipping, in_main = self.stack.pop()
            self.pre_depth -= popped == "pre"
            if popped == tag:
                if tag in BLOCK_TAGS and in_main and not skipping:
                    self.parts.append("\n")
                return

    def handle_data(self, data):
        skipping, in_main = self.inside()
        if in_main and not skipping:
            self.parts.append(data if self.pre_depth else re.sub(r"\s+", " ", data))


def html_to_text(page: str) -> str:
    extractor = MainTextExtractor()
    extractor.feed(page)
    extractor.close()
    lines = [line.rstrip() for line in "".join(extractor.parts).splitlines()]
    return squeeze_blank_lines("\n".join(line if line.strip() else "" for line in lines))


# ------------------------------------------------------------------- reading

def source_files(folder: Path) -> tuple[str, list[Path], Path]:
    """("rest" | "html", files, their root), sorted for determinism."""
    sources = folder / "_sources"
    if sources.is_dir():
        files = sorted(sources.rglob("*.txt"))
        if files:
            return "rest", files, sources
    return "html", sorted(p for p in folder.rglob("*.html") if "_static" not in p.parts), folder


def docs_documents(folder: Path | None = None) -> list[Document]:
    """Every included page as a prose document named ``docs:<section>/<page>``."""
    folder = folder or default_docs_dir()
    if not folder.is_dir():
        raise PythonDocsMissing(missing_message(folder))
    kind, files, root = source_files(folder)
    convert = rest_to_text if kind == "rest" else html_to_text
    documents = []
    for path in files:
        relative = path.relative_to(root).as_posix()
        if not is_included_page(relative):
            continue
        text = convert(path.read_text(encoding="utf-8", errors="replace"))
        if text.strip():
            documents.append(Document(page_name(relative), "prose", text))
    if not documents:
        raise PythonDocsMissing(missing_message(folder))
    return documents


def docs_version(folder: Path | None = None) -> str:
    """Version in the HTML pages' title (e.g. '3.11.2'), or 'unknown'."""
    folder = folder or default_docs_dir()
    index = folder / "index.html"
    if index.exists():
        match = re.search(r"Python ([0-9]+\.[0-9]+(?:\.[0-9]+)?)", index.read_text(errors="replace")[:4000])
        if match:
            return match.group(1)
    return "unknown"
