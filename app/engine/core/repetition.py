"""Repetition controls with Hugging Face's semantics: the repetition penalty and the no-repeat n-gram ban.

Notation (docs/ALGORITHMS.md §1, processing before warping §4.5): `z` is one row of logits over `V`
tokens and `s` the context that row continues (prompt, generated tokens, and the drafts before the row).
With penalty `θ` and n-gram size `n`, in the order `model.generate` applies them:

    z'(v) = z(v) · θ  if v occurs in s and z(v) < 0        RepetitionPenaltyLogitsProcessor
            z(v) / θ  if v occurs in s and z(v) >= 0        (once per token, however often it occurs)
            z(v)      otherwise
    z'(v) = -inf      if (s[-n+1:], v) is an n-gram of s    NoRepeatNGramLogitsProcessor
                                                            (n = 1: every token of s)

Ids beyond the logits' vocabulary (an embedding table larger than the LM head) are ignored, as there.
Both work on float32 logits, as `generate` does; nothing is float64. The controls come before the
warping of app/engine/core/sampling.py, like Hugging Face's processors before its warpers.

`process_rows` processes a batch of rows, row r continuing `prefix ++ continuations[r]`: the verification
rows of a chain (continuations[r] = drafts[:r]), a drafter's row, or a tree's nodes (each node's ancestors).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from app.engine.settings import RepetitionSettings

__all__ = ["RepetitionSettings", "penalised_where", "process_rows"]


def process_rows(logits: Tensor, prefix: Tensor, continuations: Sequence[Tensor],
                 settings: RepetitionSettings) -> Tensor:
    """(R, V) logits -> (R, V) float32 logits processed for the contexts `prefix ++ continuations[r]`.

    `prefix` (N,) and each `continuations[r]` (C_r,) hold token ids on any device. With both controls off
    the logits come back untouched (the same tensor).
    """
    if not settings.active:
        return logits
    if len(continuations) != logits.shape[0]:
        raise ValueError(f"one continuation per row: {logits.shape[0]} rows, {len(continuations)} continuations")
    contexts, lengths = _padded_contexts(prefix, continuations, logits.device)  # (R, L), (R,)
    z = logits.float()  # (R, V)
    if settings.penalty != 1.0:
        z = _penalised(z, contexts, settings.penalty)
    if settings.no_repeat_ngram > 0:
        z = z.masked_fill(_banned(contexts, lengths, settings.no_repeat_ngram, z.shape[-1]), float("-inf"))
    return z


def _penalised(z: Tensor, contexts: Tensor, penalty: float) -> Tensor:
    """The penalty on the logits (R, V) of the tokens in each row's context (R, L), a new tensor.

    Only those L entries per row are read and written, as Hugging Face's processor does: a token that occurs
    more than once is gathered each time before any is written, so it is penalised once. Padding and ids
    >= V go to a spare column that is dropped.
    """
    vocab_size = z.shape[-1]
    columns = torch.where((contexts >= 0) & (contexts < vocab_size), contexts, vocab_size)  # (R, L)
    wide = torch.cat([z, z.new_zeros(z.shape[0], 1)], dim=1)  # (R, V+1)
    score = wide.gather(1, columns)  # (R, L)
    return wide.scatter_(1, columns, _penalty_on(score, penalty))[:, :vocab_size]


def penalised_where(z: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """The penalty on the logits (..., V) where `seen` (..., V) bool marks the tokens of each row's context.

    The same rule as `process_rows`, over a mask: for training code that scores many positions of one text.
    """
    return torch.where(seen, _penalty_on(z, penalty), z)


def _penalty_on(score: Tensor, penalty: float) -> Tensor:
    return torch.where(score < 0, score * penalty, score / penalty)


def _padded_contexts(prefix: Tensor, continuations: Sequence[Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    """Row r's context `prefix ++ continuations[r]` left-aligned in (R, L) long, padded with -1; lengths (R,)."""
    prefix = prefix.reshape(-1).long().to(device)  # (N,)
    tails = [c.reshape(-1).long().to(device) for c in continuations]
    lengths = torch.tensor([prefix.numel() + t.numel() for t in tails], device=device)  # (R,)
    width = int(max((t.numel() for t in tails), default=0))
    rows = torch.full((len(tails), prefix.numel() + width), -1, dtype=torch.long, device=device)  # (R, L)
    rows[:, : prefix.numel()] = prefix
    for r, tail in enumerate(tails):
        rows[r, prefix.numel(): prefix.numel() + tail.numel()] = tail
    return rows, lengths


def _mark(tokens: Tensor, where: Tensor, vocab_size: int) -> Tensor:
    """(R, V) bool: True at tokens[r, j] wherever where[r, j]; the places not marked and ids >= V go to a spare
    column that is dropped."""
    columns = torch.where(where, tokens.clamp(min=0, max=vocab_size), vocab_size)  # (R, L)
    marks = torch.zeros(tokens.shape[0], vocab_size + 1, dtype=torch.bool, device=tokens.device)  # (R, V+1)
    return marks.scatter_(1, columns, True)[:, :vocab_size]


def _banned(contexts: Tensor, lengths: Tensor, n: int, vocab_size: int) -> Tensor:
    """(R, V) bool: the tokens that would complete an n-gram already in the row's context.

    Window j = s[j : j+n] (j <= len(s) - n, so the row's own last n-1 tokens never ban what follows them)
    bans its last token when its first n-1 tokens equal the context's last n-1 tokens.
    """
    rows, width = contexts.shape
    if width < n:
        return torch.zeros(rows, vocab_size, dtype=torch.bool, device=contexts.device)
    windows = contexts.unfold(1, n, 1)  # (R, W, n), W = L - n + 1
    starts = (lengths[:, None] - (n - 1) + torch.arange(n - 1, device=contexts.device)).clamp(min=0)  # (R, n-1)
    suffix = contexts.gather(1, starts)  # (R, n-1): each row's last n-1 tokens
    matches = (windows[..., :-1] == suffix[:, None, :]).all(dim=-1)  # (R, W)
    complete = torch.arange(windows.shape[1], device=contexts.device)[None, :] <= lengths[:, None] - n  # (R, W)
    return _mark(windows[..., -1], matches & complete, vocab_size)
