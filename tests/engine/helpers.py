"""Shared helpers for engine tests."""

from __future__ import annotations

from app.engine.decoder import SpeculativeDecoder
from app.engine.events import EndEvent, PassEvent
from app.engine.settings import DecodeSettings

PROMPTS = (
    "def add(a, b):\n    return a + b\n\ndef add(",
    "The quick brown fox jumps over the lazy dog. The quick",
    "for i in range(10):\n    print(i * i)\nfor i in",
)


def run(decoder: SpeculativeDecoder, prompt: str, **settings) -> tuple[list[PassEvent], EndEvent]:
    events = list(decoder.generate(prompt, DecodeSettings(**settings)))
    end = events[-1]
    assert isinstance(end, EndEvent), end
    assert end.reason != "error", end.error
    return [e for e in events if isinstance(e, PassEvent)], end
