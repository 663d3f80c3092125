"""Multi-token prediction modules (DeepSeek-V3 style): D sequential depths, each one transformer block.

Notation as in `common`, with h^0_i = the target's final hidden state at i.
Depth d = 1 .. D combines the previous depth's state with the embedding of
the token d steps ahead:

    u^d_i = P_d [ norm(h^{d-1}_i) ; norm(emb(x_{i+d})) ]     # (2H -> H)
    h^d_i = Block_d(u^d)_i                                   # attends to rows i-W+1 .. i of depth d
    logits^d_i = lm_head(norm(h^d_i))                        # predicts x_{i+d+1}

Drafting at i = N-2: depth 1 reads x_{N-1} (committed) and drafts x_N; depth
d reads the draft x_{N+d-2} and drafts x_{N+d-1}. At most D tokens per pass.

Attention is local (window W, at training too), so a draft is recomputed
exactly from the last D*(W-1)+1 feature rows: the drafter keeps no state,
which makes rollbacks and mid-run switching free of bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from app.engine.core.sampling import TokenSampler
from app.engine.drafters.base import Draft
from app.engine.drafters.heads.common import HeadDrafter, TargetParts, TargetShape, as_draft, has_features
from app.engine.drafters.heads.layers import Block, RMSNorm


def default_layout(target: TargetShape) -> tuple[tuple[int, ...], dict]:
    """Feature layers and default hyper-parameters for modules on `target`: the final state, 64-wide heads."""
    return (target.num_layers,), {"heads": max(1, target.hidden_size // 64)}


class MtpDepth(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.hidden_norm = RMSNorm(hidden)
        self.embed_norm = RMSNorm(hidden)
        self.proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.block = Block(hidden, heads, intermediate)
        self.out_norm = RMSNorm(hidden)

    def forward(self, previous: torch.Tensor, embedded: torch.Tensor, positions: torch.Tensor,
                window: int) -> torch.Tensor:
        """(..., T, H) previous states and (..., T, H) embeddings of the tokens d ahead -> (..., T, H)."""
        u = self.proj(torch.cat([self.hidden_norm(previous), self.embed_norm(embedded)], dim=-1))
        return self.block.causal(u, positions, window)


class MtpModules(nn.Module):
    def __init__(self, hidden_size: int, depths: int = 3, heads: int = 3, intermediate: int = 384,
                 window: int = 16) -> None:
        super().__init__()
        self.window = window
        self.depths = nn.ModuleList(MtpDepth(hidden_size, heads, intermediate) for _ in range(depths))

    @property
    def num_depths(self) -> int:
        return len(self.depths)


def rows_needed(steps_left: int, window: int) -> int:
    """Input rows a depth needs so that the last `steps_left` depths see exact windows."""
    return steps_left * (window - 1) + 1


class MtpDrafter(HeadDrafter):
    """Reads the final hidden state (feature layer num_layers); stateless (see the module docstring)."""

    module: MtpModules

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        if not has_features(features):
            return None
        with torch.inference_mode():
            return self._draft(ids, min(k, self.module.num_depths), sampler, features[0])

    def _draft(self, ids: torch.Tensor, steps: int, sampler: TokenSampler, final: torch.Tensor) -> Draft:
        window, n_rows = self.module.window, final.shape[0]  # n_rows = N-1
        start = max(0, n_rows - rows_needed(steps, window))
        hidden = final[start:]  # (R, H): h^0 of rows start .. N-2
        extended = ids.to(self.parts.device)  # (N + drafts so far,)
        tokens: list[torch.Tensor] = []  # the drafts so far: each next row continues them
        rows = []
        for d, depth in enumerate(self.module.depths[:steps]):
            assert isinstance(depth, MtpDepth)  # for the type checker: nn.ModuleList yields plain modules
            positions = torch.arange(n_rows - hidden.shape[0], n_rows, device=final.device)  # (R,)
            ahead = extended[positions + d + 1]  # (R,) x_{i+d+1}
            hidden = depth(hidden, self.parts.embed(ahead), positions, window)  # (R, H)
            token, q = sampler.draw(self.parts.logits(depth.out_norm(hidden[-1])), tokens)  # (), (V,)
            tokens.append(token)
            rows.append(q)
            extended = torch.cat([extended, token.view(1)])
            hidden = hidden[-rows_needed(steps - d - 1, window):]  # keep only rows computed exactly
        return as_draft(tokens, rows)


# ---- training: every depth over every position at once ------------------------------------------


def training_depths(module: MtpModules, parts: TargetParts, tokens: torch.Tensor,
                    final: torch.Tensor) -> Iterator[torch.Tensor]:
    """h^d (B, T, H) for d = 1 .. D, one depth at a time, from tokens (B, T) and the target's final states h^0.

    Lazy, so a caller takes depth d's loss before depth d+1 runs (the order the shipped heads were trained in).

    Depth d at row i reads x_{i+d} (clamped at the last token) and predicts x_{i+d+1}, as in `MtpDrafter._draft`.
    """
    T = tokens.shape[1]
    positions = torch.arange(T)
    hidden = final  # (B, T, H)
    for d, depth in enumerate(module.depths):
        ahead = (positions + d + 1).clamp(max=T - 1)
        hidden = depth(hidden, parts.embed(tokens[:, ahead]), positions, module.window)  # (B, T, H)
        yield hidden


MODULE, DRAFTER = MtpModules, MtpDrafter  # the trained module and the drafter that runs it (heads/format.py)
