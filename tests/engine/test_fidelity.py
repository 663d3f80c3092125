"""Fidelity metrics of an output against a reference output (app/engine/core/fidelity.py) on hand-computed values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from app.engine.core.fidelity import (
    changed_positions,
    complete_statements,
    edit_distance,
    first_divergence,
    mean_log_prob,
    parses,
    token_diff,
)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([7], [1]) == 0
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # a prefix diverges where it ends
    assert first_divergence([], []) is None


def test_token_diff_aligns_and_marks_only_the_changed_tokens():
    x, y = [1, 2, 9, 3, 4, 7], [1, 2, 3, 4, 5]  # 9 inserted in x, 5 replaced by 7
    assert token_diff(x, y) == [("equal", 0, 2, 0, 2), ("delete", 2, 3, 2, 2), ("equal", 3, 5, 2, 4),
                                ("replace", 5, 6, 4, 5)]
    assert changed_positions(x, y) == [2, 5]
    assert changed_positions([1, 2, 3], [1, 2, 3]) == [] and token_diff([], []) == []
    assert changed_positions([1, 3], [1, 2, 3]) == []  # a token missing from x marks nothing in x
    assert len(changed_positions([5, 5, 5, 5], [5, 5, 6, 5])) == 1  # one substitution, one token marked
    x, y = [4] * 300 + [8], [4] * 300 + [9]  # no junk heuristic: a common id repeated many times still aligns
    assert changed_positions(x, y) == [300]


@pytest.mark.parametrize(("a", "b", "distance"), [
    ([], [], 0), ([1, 2, 3], [], 3), ([], [4, 5], 2), ([1, 2, 3], [1, 2, 3], 0),
    ([1, 2, 3], [1, 9, 3], 1),  # one substitution
    ([1, 2, 3], [1, 3], 1),  # one deletion
    ([1, 2, 3, 4], [2, 3, 4, 5], 2),  # drop the head, add a tail: a shift is two edits, not four
    ([3, 1, 4, 1, 5], [1, 4, 1, 5, 9, 2], 3),
])
def test_edit_distance(a, b, distance):
    assert edit_distance(a, b) == distance == edit_distance(b, a)


class Bigram(nn.Module):
    """A causal LM whose logits at t depend only on token t: z_t = W[token_t]."""

    def __init__(self, rows: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(rows)

    def forward(self, input_ids, use_cache=False):
        return SimpleNamespace(logits=self.w[input_ids])  # (1, T, V)


def test_mean_log_prob_by_hand():
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    model = Bigram(probs.log() + 3.0)  # a constant shift per row: softmax gives the same probabilities back
    # prompt (0,), output (1, 2, 2): p(1 | 0) p(2 | 1) p(2 | 2) = 0.25 * 0.3 * 0.6
    expected = (math.log(0.25) + math.log(0.3) + math.log(0.6)) / 3
    assert mean_log_prob(model, [0], [1, 2, 2]) == pytest.approx(expected, rel=1e-6)
    # only the last prompt token conditions a bigram; the output's first token is scored after it
    assert mean_log_prob(model, [2, 1], [0]) == pytest.approx(math.log(0.1), rel=1e-6)
    assert mean_log_prob(model, [0], []) is None
    with pytest.raises(ValueError, match="prompt token"):
        mean_log_prob(model, [], [1])


def test_mean_log_prob_of_half_precision_logits_is_float32_arithmetic():
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    model = Bigram(probs.log()).to(torch.bfloat16)
    # bfloat16 logits, widened before the log-softmax: close to the float32 figure, not bfloat16's 3 digits apart
    wide = (math.log(0.25) + math.log(0.3)) / 2
    assert mean_log_prob(model, [0], [1, 2]) == pytest.approx(wide, abs=2e-2)


def test_parses_and_complete_lines():
    assert parses("def f(n):\n    return n\n")
    assert not parses("def f(n):\n    return (n\n")
    assert not parses("def f(n):\n")  # a block without a body
    assert not parses("x = '\0'\0")
    assert complete_statements("a = 1\nb = (") == "a = 1\n"
    assert complete_statements("no newline") == ""
    text = "def f(n):\n    return n\n\ndef g(n):\n    if n:\n        return ("
    assert complete_statements(text) == "def f(n):\n    return n\n\n"  # cut before g, whose block is unfinished
    assert parses(complete_statements(text)) and not parses(text)
