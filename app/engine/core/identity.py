"""Greedy identity, said honestly: "identical", a numerical tie, or a real mismatch.

Greedy speculative decoding reproduces greedy decoding exactly in exact
arithmetic (docs/ALGORITHMS.md §3). In floating point, verifying K + 1 tokens
in one forward and decoding one token at a time add the same numbers in a
different order, so their logits differ by rounding; in bfloat16 and float16
that is enough to swap two tokens whose logits were nearly equal. Such a
divergence is a *numerical tie*, not a defect: the target itself could not
tell the two tokens apart at its precision. Any other divergence is a real
mismatch.

`classify(reference, candidate, logits, dtype)`: `reference` is the plain
greedy token sequence, `candidate` the speculative one, `logits` (V,) the
target's logits before token i = the first index where they differ (the
reference's context), `dtype` the model's. The two tokens at i form a tie when
they are the target's top two and their logits lie within `tolerance` of each
other: a few units in the last place of the dtype at the logits' magnitude
(rounding through a deep network accumulates over many operations; TIE_ULPS
units allow for it, still far below the gaps of a real preference).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from app.engine.core.fidelity import first_divergence

if TYPE_CHECKING:  # the window's process reads `Identity` (in race results) and never loads torch
    import torch

    from app.engine.settings import RepetitionSettings

Outcome = Literal["identical", "tie", "mismatch"]
TIE_ULPS = 8  # units in the last place of the model's dtype, at the logits' magnitude, that still count as a tie


@dataclass(frozen=True)
class Identity:
    outcome: Outcome
    index: int | None = None  # first differing generated token (0-based); None when identical
    gap: float | None = None  # target logit of the reference token minus that of the candidate's, at `index`
    tolerance: float | None = None  # the largest gap that counts as a tie at this dtype and magnitude

    @property
    def identical(self) -> bool:
        return self.outcome == "identical"

    def __str__(self) -> str:
        if self.outcome == "identical":
            return "identical"
        where = f"diverged at token {self.index}"
        if self.gap is None:
            return f"{where}, a real mismatch"
        if self.outcome == "tie":
            return f"{where}, a numerical tie (top-2 gap {abs(self.gap):.3g})"
        return f"{where}, a real mismatch (logit gap {self.gap:.3g}; rounding explains at most {self.tolerance:.2g})"


def tolerance(logits: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest top-2 gap that rounding in `dtype` can produce at the magnitude of these logits."""
    import torch

    eps = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.float32).eps
    scale = max(1.0, float(logits.abs().max()))
    return TIE_ULPS * eps * scale


def classify(reference: Sequence[int], candidate: Sequence[int], logits: torch.Tensor | None,
             dtype: torch.dtype) -> Identity:
    """Identical, a numerical tie at the first divergence, or a real mismatch (module docstring)."""
    index = first_divergence(reference, candidate)
    if index is None:
        return Identity("identical")
    if logits is None or index >= min(len(reference), len(candidate)):
        return Identity("mismatch", index)  # no logits to judge, or one run stopped early (EOS, error)
    logits = logits.detach().float().cpu()  # (V,): a handful of numbers compared on the host
    a, b = reference[index], candidate[index]
    top2 = set(logits.topk(2).indices.tolist())
    gap = float(logits[a] - logits[b])
    limit = tolerance(logits, dtype)
    outcome: Outcome = "tie" if {a, b} == top2 and abs(gap) <= limit else "mismatch"
    return Identity(outcome, index, gap, limit)


def logits_at(model, context: Sequence[int], repetition: RepetitionSettings | None = None) -> torch.Tensor:
    """The target's logits (V,) after `context`, from one plain forward (no cache), processed by the
    repetition controls when given (the logits greedy decoding chose from)."""
    import torch

    from app.engine.core.repetition import process_rows

    device = next(model.parameters()).device
    with torch.inference_mode():
        ids = torch.tensor([list(context)], device=device)
        logits = model(input_ids=ids).logits[0, -1:].float()  # (1, V)
        if repetition is not None:
            logits = process_rows(logits, ids[0], [ids[0, :0]], repetition)
        return logits[0].cpu()
