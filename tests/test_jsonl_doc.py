"""docs/JSONL.md is the JSON lines schema a reader relies on: it must name every field the events write, and
nothing they do not."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

from app.engine import events

DOC = Path(__file__).resolve().parents[1] / "docs" / "JSONL.md"
EVENTS = {"start": events.StartEvent, "pass": events.PassEvent, "notice": events.NoticeEvent,
          "end": events.EndEvent}


def unwrap(annotation) -> tuple[object, int]:
    """The type inside Optional and tuple[..., ...] wrappers, and how many list levels the wrappers add."""
    lists = 0
    while True:
        origin = typing.get_origin(annotation)
        arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
        if origin in (typing.Union, types.UnionType) and len(arguments) == 1:
            annotation = arguments[0]
        elif origin is tuple:
            annotation, lists = arguments[0], lists + 1
        else:
            return annotation, lists


def field_paths(cls, prefix: str = "") -> tuple[set[str], set[str]]:
    """(leaves, objects): every written field as `a.b`, `a[].b`; objects are the fields holding dataclasses."""
    leaves, objects = set(), set()
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        inner, lists = unwrap(hints[field.name])
        path = prefix + field.name + "[]" * lists
        if dataclasses.is_dataclass(inner):
            objects.add(path)
            inner_leaves, inner_objects = field_paths(inner, path + ".")
            leaves |= inner_leaves
            objects |= inner_objects
        else:
            leaves.add(path)
    return leaves, objects


def documented() -> dict[str, set[str]]:
    """The first column of each event section's table, by section."""
    fields: dict[str, set[str]] = {}
    section = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## (\w+)\s*$", line)
        if heading:
            section = heading.group(1)
            fields[section] = set()
        elif section and (row := re.match(r"^\| `([^`]+)` \|", line)):
            fields[section].add(row.group(1))
    return fields


def test_the_doc_has_a_section_for_every_event_type_and_no_other():
    assert set(documented()) == set(EVENTS)


def test_every_field_an_event_writes_is_documented():
    doc = documented()
    missing = {name: sorted(field_paths(cls)[0] - doc[name]) for name, cls in EVENTS.items()}
    assert not any(missing.values()), f"document these fields in docs/JSONL.md: {missing}"


def test_nothing_documented_is_missing_from_the_events():
    doc = documented()
    extra = {name: sorted(doc[name] - set.union(*field_paths(cls))) for name, cls in EVENTS.items()}
    assert not any(extra.values()), f"docs/JSONL.md documents fields the events do not write: {extra}"


def test_the_paths_follow_what_to_json_line_writes():
    """The doc's notation is the JSON's shape: a nested object for a dataclass, a list for a tuple."""
    leaves, objects = field_paths(events.PassEvent)
    assert {"drafted[].outcome", "detail.p_top[][].prob", "stats.alpha", "tree[].parent", "path[]"} <= leaves
    assert {"appended", "detail", "ledger"} <= objects
