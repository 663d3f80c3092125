"""DFlash-style block drafter: one forward over [anchor, MASK x (bs-1)] predicts the whole block.

Notation as in `common`; `bs` is the block size fixed at training. The anchor
is x_{N-1}, the last committed token (the target has not seen it). The block
rows sit at positions N-1 .. N+bs-2; row j >= 1 predicts the token at its own
position, x_{N-1+j}, so one forward yields bs-1 drafts.

    c_i   = norm(F [ h^low_i ; h^mid_i ; h^high_i ])        # context, i in [N-1-W, N-2]
    b_0   = emb(x_{N-1}),  b_j = m (a learned mask vector)  # block rows
    b     = Block_L( ... Block_1(b; keys/values of [c ; b]) )
    logits_j = lm_head(norm(b_j)),  j = 1 .. bs-1

Every layer projects the context rows into its own keys and values ("KV
injection"); block rows attend to all of the context window and to each
other in both directions. Context is limited to the last W rows at training
and drafting alike, so the drafter keeps no state. K > bs-1 gives bs-1
drafts; K < bs-1 uses the first K rows of the same forward.
"""

from __future__ import annotations

import torch
from torch import nn

from app.engine.core.sampling import TokenSampler
from app.engine.drafters.base import Draft
from app.engine.drafters.heads.common import (
    HeadDrafter,
    TargetParts,
    as_draft,
    fuse_input,
    fused_layout,
    has_features,
)
from app.engine.drafters.heads.layers import Block, RMSNorm

default_layout = fused_layout


class DFlashDrafterModel(nn.Module):
    def __init__(self, hidden_size: int, num_features: int = 3, layers: int = 2, heads: int = 3,
                 intermediate: int = 384, block_size: int = 6, window: int = 64) -> None:
        super().__init__()
        self.block_size, self.window = block_size, window
        self.fuse = nn.Linear(num_features * hidden_size, hidden_size, bias=False)
        self.context_norm = RMSNorm(hidden_size)
        self.mask_embedding = nn.Parameter(torch.zeros(hidden_size))
        self.layers = nn.ModuleList(Block(hidden_size, heads, intermediate) for _ in range(layers))
        self.out_norm = RMSNorm(hidden_size)

    def context(self, features: list[torch.Tensor]) -> torch.Tensor:
        """Fused, normed context rows: each feature (..., T, H) -> (..., T, H)."""
        return self.context_norm(self.fuse(fuse_input(features)))

    def block_rows(self, anchor: torch.Tensor) -> torch.Tensor:
        """Anchor embeddings (..., H) -> block inputs (..., bs, H): [anchor, mask, ..., mask]."""
        masks = self.mask_embedding.to(anchor.dtype).expand(*anchor.shape[:-1], self.block_size - 1, -1)
        return torch.cat([anchor.unsqueeze(-2), masks], dim=-2)

    def forward(self, rows: torch.Tensor, positions: torch.Tensor, context: torch.Tensor,
                context_positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Block rows (..., Tq, H) attend to [context (..., Tc, H); themselves] under mask (Tq, Tc+Tq)."""
        for layer in self.layers:
            assert isinstance(layer, Block)  # for the type checker: nn.ModuleList yields plain modules
            memory = layer.attn.keys_values(context, context_positions).cat(layer.keys_values(rows, positions))
            rows = layer(rows, positions, memory, mask)
        return self.out_norm(rows)


class DFlashDrafter(HeadDrafter):
    """Reads the low, middle and high hidden states; stateless: the context window is recomputed each pass."""

    module: DFlashDrafterModel

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        if not has_features(features):
            return None
        module, n_rows = self.module, features[0].shape[0]  # n_rows = N-1
        start = max(0, n_rows - module.window)
        with torch.inference_mode():
            context = module.context([f[start:] for f in features])  # (Tc, H)
            device = context.device
            context_positions = torch.arange(start, n_rows, device=device)
            positions = torch.arange(n_rows, n_rows + module.block_size, device=device)  # anchor at N-1
            rows = module.block_rows(self.parts.embed(ids[-1]))  # (bs, H)
            mask = torch.ones(module.block_size, context.shape[0] + module.block_size, dtype=torch.bool,
                              device=device)  # the whole window and the whole block
            hidden = module(rows, positions, context, context_positions, mask)[1: 1 + k]  # (K', H)
            tokens, q = sampler.draw(self.parts.logits(hidden))  # (K',), (K', V)
        return as_draft(tokens, q)


# ---- training: many anchors' blocks in one forward ----------------------------------------------


def training_mask(anchors: torch.Tensor, T: int, block: int, window: int) -> torch.Tensor:
    """(A*bs, T + A*bs) bool: block rows of anchor a see context c in [a-W, a-1] and their own block."""
    context = torch.arange(T)
    anchor_of_row = anchors.repeat_interleave(block)  # (A*bs,)
    sees_context = (context[None, :] <= anchor_of_row[:, None] - 1) & \
                   (anchor_of_row[:, None] - 1 - context[None, :] < window)
    same_block = torch.block_diag(*[torch.ones(block, block, dtype=torch.bool)] * len(anchors))
    return torch.cat([sees_context, same_block], dim=1)


def training_forward(module: DFlashDrafterModel, parts: TargetParts, tokens: torch.Tensor,
                     features: list[torch.Tensor], anchors: torch.Tensor) -> torch.Tensor:
    """Block outputs (B, A*bs, H) for anchors (A,); row j of anchor a sits at a+j and predicts x_{a+j}.

    tokens (B, T), features [(B, T, H)]. The anchor at a plays the role of x_{N-1} in `DFlashDrafter.propose`:
    its block sees the context rows before it within the window, and the whole of its own block.
    """
    T, bs = tokens.shape[1], module.block_size
    context = module.context(features)  # (B, T, H)
    rows = module.block_rows(parts.embed(tokens[:, anchors])).flatten(1, 2)  # (B, A*bs, H)
    positions = anchors.repeat_interleave(bs) + torch.arange(bs).repeat(len(anchors))  # (A*bs,)
    return module(rows, positions, context, torch.arange(T), training_mask(anchors, T, bs, module.window))


MODULE, DRAFTER = DFlashDrafterModel, DFlashDrafter  # the trained module and the drafter that runs it (heads/format.py)
