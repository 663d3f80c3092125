"""How far an output strays from a reference output: the fidelity side of ASD's trade-off (docs/ALGORITHMS.md §5.7).

Notation. `y` is the reference sequence of generated ids (strict greedy's
output for the same prompt), `x` another output (ASD's), both without the
prompt `c` of N tokens. The target's log-probability of `x` given `c` is

    log p(x | c) = sum_t log softmax(z_t)[x_t],   z_t = target logits after c, x_<t

and the figure compared across outputs is its mean over t (outputs of
different lengths stay comparable). One forward over `c + x`; the log-softmax
runs in float32 on the model's device, the gathered values are summed in
float64 on the host (`app/engine/core/exact.py`).

`first_divergence`, `edit_distance`, `token_diff`, `changed_positions` and `parses` are pure Python.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from difflib import SequenceMatcher


def first_divergence(ids: Sequence[int], reference: Sequence[int]) -> int | None:
    """The first position t with x_t != y_t (the shorter length if one is a prefix of the other); None if equal."""
    for t, (a, b) in enumerate(zip(ids, reference, strict=False)):
        if a != b:
            return t
    return None if len(ids) == len(reference) else min(len(ids), len(reference))


def edit_distance(ids: Sequence[int], reference: Sequence[int]) -> int:
    """Levenshtein distance on token ids: the fewest insertions, deletions and substitutions from x to y.

    Two rows of the dynamic programme: d[i][j] = min(d[i-1][j] + 1, d[i][j-1] + 1, d[i-1][j-1] + [x_i != y_j]).
    """
    previous = list(range(len(reference) + 1))
    for i, a in enumerate(ids, start=1):
        current = [i]
        for j, b in enumerate(reference, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def token_diff(ids: Sequence[int], reference: Sequence[int]) -> list[tuple[str, int, int, int, int]]:
    """An alignment of x against y: `difflib` opcodes (tag, i1, i2, j1, j2) turning x[i1:i2] into y[j1:j2].

    Tags are "equal", "replace", "delete" (x[i1:i2] has no counterpart in y) and "insert" (y[j1:j2] has
    none in x); no junk heuristic, so repeated ids (indentation, brackets) align like any other token.
    """
    return list(SequenceMatcher(None, list(ids), list(reference), autojunk=False).get_opcodes())


def changed_positions(ids: Sequence[int], reference: Sequence[int]) -> list[int]:
    """Positions t of x whose token is not part of an aligned match with y (replaced or inserted), ascending."""
    return [t for tag, i1, i2, _j1, _j2 in token_diff(ids, reference) if tag != "equal" for t in range(i1, i2)]


def mean_log_prob(model, prompt_ids: Sequence[int], ids: Sequence[int]) -> float | None:
    """(1/T) sum_t log p(x_t | c, x_<t) under `model` (a causal LM), in one forward; None for an empty x."""
    if not ids:
        return None
    if not prompt_ids:
        raise ValueError("mean_log_prob needs at least one prompt token to condition the first output token on")
    import torch  # here: the window's process imports this module for the race's diff, and never loads torch

    from app.engine.core.exact import to_host_float64

    device = next(model.parameters()).device
    n, t = len(prompt_ids), len(ids)
    fed = torch.tensor([*prompt_ids, *ids[:-1]], dtype=torch.long, device=device)  # (N + T - 1,)
    with torch.inference_mode():
        logits = model(input_ids=fed[None], use_cache=False).logits[0, n - 1:]  # (T, V) in the model's dtype
        log_p = logits.float().log_softmax(dim=-1)  # (T, V) float32 on the device
        picked = log_p.gather(1, torch.tensor(ids, dtype=torch.long, device=device)[:, None])[:, 0]  # (T,)
    return float(to_host_float64(picked).sum()) / t


def complete_statements(text: str) -> str:
    """`text` up to the start of its last top-level line (one that begins with neither a space nor a tab).

    A generation cut at the token limit ends mid-statement, often mid-block; what precedes the start of
    its last top-level statement is complete, so whether that parses is what the output got right.
    """
    starts = [m.start() for m in re.finditer(r"\n(?=[^\s])", text)]
    return text[: starts[-1] + 1] if starts else ""


def parses(source: str) -> bool:
    """Whether `source` is valid Python (`ast.parse`)."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte
        return False
    return True
