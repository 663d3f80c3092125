"""EAGLE-style drafter (EAGLE-3 flavour): one decoder layer, autoregressive over its own features.

Notation as in `common`. The target's low, middle and high hidden states are
fused into one feature, then each row reads the token that follows it:

    g_i = F [ h^low_i ; h^mid_i ; h^high_i ]        # (3H -> H), i <= N-2
    u_i = P [ emb(x_{i+1}) ; g_i ]                  # (2H -> H)
    o_i = Block(u)_i                                # causal, window W
    logits_i = lm_head(norm(o_i))                   # predicts x_{i+2}

Row N-2 (fed x_{N-1}) drafts x_N. Each further step s >= 1 appends one row at
position N-2+s whose feature is the drafter's own output o of the previous
row (not a target feature, which does not exist yet) and whose token is the
previous draft. Training unrolls exactly these steps ("training-time test").

The drafter keeps the keys and values of its rows for committed positions
(row i is a function of x_0 .. x_{i+1}), crops them to the prefix shared with
the new sequence after a rollback, and adds the rows of new committed tokens;
draft rows are thrown away after each proposal. A tree proposal grows rows the
same way, each seeing only its tree ancestors among the draft rows.
"""

from __future__ import annotations

import torch
from torch import nn

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft, TreeRows
from app.engine.drafters.base import Draft
from app.engine.drafters.heads.common import (
    HeadDrafter,
    TargetParts,
    as_draft,
    fuse_input,
    fused_layout,
    has_features,
)
from app.engine.drafters.heads.layers import Block, KeysValues, RMSNorm, window_mask
from app.engine.drafters.tree_growth import grow_tree
from app.engine.runtime.cached_model import common_prefix_length

default_layout = fused_layout


class EagleHead(nn.Module):
    def __init__(self, hidden_size: int, num_features: int = 3, heads: int = 3, intermediate: int = 512,
                 window: int = 128) -> None:
        super().__init__()
        self.window = window
        self.fuse = nn.Linear(num_features * hidden_size, hidden_size, bias=False)
        self.proj = nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.block = Block(hidden_size, heads, intermediate)
        self.out_norm = RMSNorm(hidden_size)

    def rows(self, embedded: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        """Inputs u (..., T, H) from token embeddings and (fused or own) features, both (..., T, H)."""
        return self.proj(torch.cat([embedded, feature], dim=-1))

    def step(self, u: torch.Tensor, positions: torch.Tensor,
             memory: KeysValues | None) -> tuple[torch.Tensor, KeysValues]:
        """Rows u (T, H) at `positions` after the rows in `memory` (None: no rows yet) -> outputs o (T, H), memory
        with them."""
        normed = self.block.attn_norm(u)
        fresh = self.block.keys_values(u, positions, normed)
        memory = memory.cat(fresh) if memory is not None else fresh
        visible = memory.tail(self.window + positions.numel())
        mask = window_mask(positions, visible.positions, self.window)
        return self.block(u, positions, visible, mask, normed), memory


class EagleDrafter(HeadDrafter):
    """Reads the low, middle and high hidden states; keeps the keys and values of its committed rows."""

    module: EagleHead

    def reset(self) -> None:
        self.seen = torch.empty(0, dtype=torch.long)  # tokens x_0 .. x_L whose rows 0 .. L-1 are cached
        self.memory: KeysValues | None = None

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        if not has_features(features):
            return None
        with torch.inference_mode():
            output = self._catch_up(ids, features)  # (H,) o of row N-2
            return self._draft(ids, k, sampler, output)

    def _catch_up(self, ids: torch.Tensor, features: list[torch.Tensor]) -> torch.Tensor:
        """Cache the rows of all committed positions 0 .. N-2; the output of the last one."""
        n_rows = features[0].shape[0]
        # Row i depends on x_0 .. x_{i+1}; recompute at least the last row to get its output.
        cached = len(self.memory) if self.memory is not None else 0
        valid = max(0, min(common_prefix_length(self.seen, ids) - 1, n_rows - 1, cached))
        memory = self.memory.head(valid) if valid and self.memory is not None else None  # valid <= cached
        fused = self.module.fuse(fuse_input([f[valid:] for f in features]))  # (T, H)
        u = self.module.rows(self.parts.embed(ids[valid + 1: n_rows + 1]), fused)  # (T, H)
        positions = torch.arange(valid, n_rows, device=fused.device)
        output, self.memory = self.module.step(u, positions, memory)
        self.seen = ids[: n_rows + 1].clone()
        return output[-1]

    def _draft(self, ids: torch.Tensor, k: int, sampler: TokenSampler, output: torch.Tensor) -> Draft:
        memory, position = self.memory, ids.numel() - 2  # position of the row that produced `output`
        tokens: list[torch.Tensor] = []  # the drafts so far: each next row continues them
        rows = []
        for step in range(k):
            token, q = sampler.draw(self.parts.logits(self.module.out_norm(output)), tokens)  # (), (V,)
            tokens.append(token)
            rows.append(q)
            if step + 1 < k:
                position += 1
                u = self.module.rows(self.parts.embed(token.view(1)), output.view(1, -1))  # (1, H)
                positions = torch.tensor([position], device=u.device)
                out, memory = self.module.step(u, positions, memory)
                output = out[-1]
        return as_draft(tokens, rows)


    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features: list[torch.Tensor] | None = None) -> TreeDraft | None:
        """A tree grown round by round (tree_growth.py); each round's rows see the committed rows in the window,
        their tree ancestors and themselves, so every node's q equals the chain's q for its path."""
        if not has_features(features):
            return None
        with torch.inference_mode():
            root_output = self._catch_up(ids, features)  # (H,) o of row N-2
            rows = _TreeRounds(self.module, self.memory, root_output, ids.numel() - 1)

            def expand(tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
                return self.parts.logits(self.module.out_norm(rows.step(self.parts.embed(tokens), parents)))  # (F, V)

            root_logits = self.parts.logits(self.module.out_norm(root_output))  # (V,)
            return grow_tree(root_logits, expand, depth, budget, sampler)


class _TreeRounds:
    """The head's rows of one tree: keys and values after the committed rows, outputs, who sees whom."""

    def __init__(self, module: EagleHead, memory: KeysValues | None, root_output: torch.Tensor,
                 first_position: int) -> None:
        self.module, self.memory, self.root_output = module, memory, root_output
        self.first_position = first_position  # position of a row hanging off the committed rows (N-1)
        self.rows = TreeRows()
        self.outputs = root_output.new_empty(0, root_output.numel())  # (T, H)
        self.tail: KeysValues | None = None

    def step(self, embedded: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """New rows: embedded tokens (F, H), parents (F,) among earlier rows (-1: the committed ones) -> o (F, H)."""
        old = len(self.rows)
        self.rows.add(torch.zeros(parents.numel(), dtype=torch.long), parents)
        own = torch.stack([self.root_output if int(p) < 0 else self.outputs[int(p)] for p in parents])  # (F, H)
        u = self.module.rows(embedded, own)  # (F, H)
        positions = (self.first_position + self.rows.depths[old:]).to(u.device)  # (F,)
        normed = self.module.block.attn_norm(u)
        fresh = self.module.block.keys_values(u, positions, normed)
        self.tail = fresh if self.tail is None else self.tail.cat(fresh)
        committed = self.memory.tail(self.module.window) if self.memory is not None else None
        window = self.module.window
        tail_visible = self.rows.sees[old:].to(u.device) & window_mask(positions, self.tail.positions, window)
        if committed is not None:
            visible = committed.cat(self.tail)
            mask = torch.cat([window_mask(positions, committed.positions, window), tail_visible], dim=1)
        else:
            visible, mask = self.tail, tail_visible
        out = self.module.block(u, positions, visible, mask, normed)  # (F, H)
        self.outputs = torch.cat([self.outputs, out])
        return out


# ---- training: the same steps for every position at once ("training-time test") -------------------


def unrolled_mask(rows: int, step: int, window: int) -> torch.Tensor:
    """(R, (step+1) R) bool: step `step` row i (position i+step) sees step-0 rows j <= i in its window and its own
    earlier steps."""
    base = torch.arange(rows)
    committed = window_mask(base + step, base, window) & (base[None, :] <= base[:, None])  # (R, R)
    own = torch.eye(rows, dtype=torch.bool).repeat(1, step)  # (R, step*R): row i of steps 1..step
    return torch.cat([committed, own], dim=1)


def unrolled_outputs(module: EagleHead, parts: TargetParts, tokens: torch.Tensor, features: list[torch.Tensor],
                     steps: int) -> list[torch.Tensor]:
    """Outputs o (B, T-1, H) of each unrolled step; row i of step s sits at position i+s and predicts x_{i+s+2}.

    tokens (B, T), features [(B, T, H)]. Step 0 reads the target's fused features, step s >= 1 the head's own
    outputs of step s-1, exactly as `EagleDrafter._draft` feeds its drafting steps.
    """
    T = tokens.shape[1]
    rows = torch.arange(T - 1)
    feature = module.fuse(torch.cat(features, -1))[:, :-1]  # (B, T-1, H)
    embedded = parts.embed(tokens)  # (B, T, H)
    memory, outputs = None, []
    for s in range(steps):
        u = module.rows(embedded[:, (rows + s + 1).clamp(max=T - 1)], feature)  # (B, T-1, H): reads x_{i+s+1}
        kv = module.block.keys_values(u, rows + s)
        memory = kv if memory is None else memory.cat(kv)
        mask = window_mask(rows, rows, module.window) if s == 0 else unrolled_mask(T - 1, s, module.window)
        feature = module.block(u, rows + s, memory, mask)  # own outputs: the next step's features
        outputs.append(feature)
    return outputs


MODULE, DRAFTER = EagleHead, EagleDrafter  # the trained module and the drafter that runs it (heads/format.py)
