"""Shared helpers for engine tests."""

from __future__ import annotations

from collections import Counter

import torch
from scipy.stats import chisquare

from app.engine.core.repetition import process_rows
from app.engine.core.sampling import TokenSampler, warp_probs
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import EndEvent, PassEvent
from app.engine.settings import DecodeSettings, RepetitionSettings

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


def first_two_distribution(models, prompt: str, sampling,
                           repetition: RepetitionSettings | None = None) -> dict[tuple[int, int], float]:
    """Exact P(t1, t2) of the target alone over the support left after warping (float32 on the models' device),
    with the repetition controls applied to the logits first when given."""
    repetition = repetition or RepetitionSettings()
    ids = models.tokenizer(prompt, return_tensors="pt").input_ids.to(models.device)
    with torch.inference_mode():
        z1 = process_rows(models.target(ids).logits[0, -1:].float(), ids[0], [ids[0, :0]], repetition)  # (1, V)
        p1 = warp_probs(z1[0], sampling)  # (V,)
        firsts = p1.nonzero().flatten()  # (F,)
        batch = torch.cat([ids.repeat(len(firsts), 1), firsts[:, None]], dim=1)  # (F, n + 1)
        z2 = process_rows(models.target(batch).logits[:, -1].float(), ids[0], list(firsts[:, None]), repetition)
        p2 = warp_probs(z2, sampling)  # (F, V)
    p1, p2, firsts = p1.cpu(), p2.cpu(), firsts.cpu()
    joint = {(int(a), int(b)): float(p1[a]) * float(p2[i, b]) for i, a in enumerate(firsts)
             for b in p2[i].nonzero().flatten()}
    total = sum(joint.values())
    return {cell: prob / total for cell, prob in joint.items()}


def chi_square_pvalue(counts: Counter, exact: dict, n: int) -> float:
    """Goodness of fit of `counts` (n samples) to `exact`, pooling cells expected below 5 times."""
    big = [c for c in sorted(exact, key=exact.get, reverse=True) if exact[c] * n >= 5]
    observed = [counts[c] for c in big] + [n - sum(counts[c] for c in big)]
    expected = [exact[c] * n for c in big] + [n - sum(exact[c] * n for c in big)]
    if expected[-1] < 1e-6:
        observed, expected = observed[:-1], expected[:-1]
    expected = [e * sum(observed) / sum(expected) for e in expected]
    return float(chisquare(observed, expected).pvalue)


def fail_on_call(calls: int, error: BaseException):
    """A wrapper factory: the wrapped method raises `error` on its `calls`-th call."""
    def wrap(method):
        count = {"n": 0}

        def wrapped(*args, **kwargs):
            count["n"] += 1
            if count["n"] == calls:
                raise error
            return method(*args, **kwargs)
        return wrapped
    return wrap


class ForcedSampler(TokenSampler):
    """A greedy sampler that picks the given tokens in turn: the chain drafter then drafts along a chosen path."""

    def __init__(self, path: list[int]) -> None:
        super().__init__(None, torch.Generator())
        self.path = list(path)

    def pick(self, probs: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.path.pop(0) if self.path else 0)
