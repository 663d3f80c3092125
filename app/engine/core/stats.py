"""Running statistics of a generation and the theory they are compared with: the one place both are computed.

Notation (docs/ALGORITHMS.md §6-§7). A pass drafts K' tokens; per run

    A = accepted drafts, R = passes that ended in a rejection, D = judged drafts (clipped ones excluded, §7.3)

    alpha             = A / (A + R)                 acceptance per tested position, the α of E and speedup (§7.1)
    acceptance_rate   = A / D                       the draft acceptance rate of vLLM and Spec-Bench (§7.2)
    alpha_i           = accepted at i / tested at i per draft position; the i.i.d. model says alpha_i = alpha (§7.4)
    c                 = t_D / t_T                   draft time per drafted token over one target forward of one token
    E(alpha, K)       = (1 - alpha^(K+1)) / (1 - alpha)          tokens per pass (§6.1)
    speedup(alpha, K, c)    = E(alpha, K) / (K c + 1)            Leviathan et al. (§6.2)
    speedup(alpha, K, c, v) = E(alpha, K) / (K c + v),  v = t_V(K+1) / t_T   with the measured verify cost (§6.2)

How t_T is measured (§7.5): as the median of the run's one-token target forwards, which are the passes that
drafted nothing (a plain step is exactly one such forward) and a few one-token forwards the decoder times
before the first drafting pass of its models (`SpeculativeDecoder._time_one_token_forwards`) and reuses
for every later request, so that a run whose every pass drafts still has one. The verification forward of
K' + 1 tokens is never used as t_T: it is t_V, and on a CPU it costs more than one token's forward. The
estimated speedup tokens · t_T / time is what a plain run of the same passes would have taken over what this
run took; only the race measures a real plain run.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.engine.events import (
    ACCEPTED,
    ASD_EXCEPTION,
    CLIPPED,
    DraftedToken,
    PassEvent,
    RunningStats,
    Timing,
    TreeNode,
)


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float) -> float:
    return expected_tokens_per_pass(alpha, k) / (k * c + 1.0)


def predicted_speedup_of_passes(alpha: float, c: float, drafted: Sequence[int]) -> float:
    """E(alpha, K) / (K c + 1), summed over passes whose K varied (short lookups, adaptive K, plain steps)."""
    tokens = sum(expected_tokens_per_pass(alpha, k) for k in drafted)
    cost = sum(k * c + 1.0 for k in drafted)
    return tokens / cost


def optimal_k(alpha: float, c: float, k_max: int = 64) -> int:
    """The K in 1..k_max with the highest predicted speedup (smallest K on ties)."""
    return max(range(1, k_max + 1), key=lambda k: (predicted_speedup(alpha, k, c), -k))


def speedup_with_verify_cost(alpha: float, k: int, c: float, verify_cost: float) -> float:
    """E(alpha, K) / (K c + v), v = t_V(K+1) / t_T: the paper's model with the measured verification forward."""
    return expected_tokens_per_pass(alpha, k) / (k * c + verify_cost)


def mean_expected_tokens(alpha: float, draft_lengths: Mapping[int, int]) -> float:
    """E(alpha, K_j) averaged over passes, each with its own K_j (§6.1); `draft_lengths` maps K_j -> passes."""
    passes = sum(draft_lengths.values())
    return sum(n * expected_tokens_per_pass(alpha, k) for k, n in draft_lengths.items()) / passes


# ---- acceptance ----------------------------------------------------------------------------------

def tested_positions(drafted: Sequence[DraftedToken]) -> list[bool]:
    """One Bernoulli trial per position the target tested in a pass: True accepted, False the rejection.

    Drafts after the first rejection were never tested; a clipped draft ends the trials without a
    rejection (the end of the generation, not the target, cut the block: §7.3).
    """
    trials: list[bool] = []
    for token in drafted:
        if token.outcome == CLIPPED:
            break
        trials.append(token.outcome in (ACCEPTED, ASD_EXCEPTION))
        if not trials[-1]:
            break
    return trials


@dataclass
class Acceptance:
    """A, R and D of some passes (§7.1-§7.2)."""

    accepted: int = 0  # A
    rejections: int = 0  # R: passes that ended in a rejection
    judged: int = 0  # D: drafts neither clipped nor absent

    def add(self, drafted: Sequence[DraftedToken]) -> None:
        trials = tested_positions(drafted)
        self.accepted += sum(trials)
        self.rejections += trials.count(False)
        self.judged += sum(token.outcome != CLIPPED for token in drafted)

    def __add__(self, other: Acceptance) -> Acceptance:
        return Acceptance(self.accepted + other.accepted, self.rejections + other.rejections,
                          self.judged + other.judged)

    @property
    def alpha(self) -> float | None:
        """α̂ = A / (A + R), the maximum-likelihood α of the i.i.d. model (§7.1)."""
        tested = self.accepted + self.rejections
        return self.accepted / tested if tested else None

    @property
    def acceptance_rate(self) -> float | None:
        """A / D (§7.2); below α for K > 1, never to be fed to E(α, K)."""
        return self.accepted / self.judged if self.judged else None


class RollingAcceptance:
    """Acceptance of every pass so far and of the last `window` passes."""

    def __init__(self, window: int = 16) -> None:
        self.total = Acceptance()
        self._recent: deque[Acceptance] = deque(maxlen=window)

    def add(self, drafted: Sequence[DraftedToken]) -> None:
        one = Acceptance()
        one.add(drafted)
        self.total = self.total + one
        self._recent.append(one)

    @property
    def recent(self) -> Acceptance:
        return sum(self._recent, Acceptance())


@dataclass
class RankAcceptance:
    """P_r = accepted at sibling rank r / tried at rank r (§9.4): how often the r-th child tried is accepted
    once the ones before it were rejected. A chain's drafts all have rank 0, so there P_0 is α."""

    tried: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def add_trial(self, rank: int, accepted: bool) -> None:
        while len(self.tried) <= rank:
            self.tried.append(0)
            self.accepted.append(0)
        self.tried[rank] += 1
        self.accepted[rank] += accepted

    def add_chain(self, drafted: Sequence[DraftedToken]) -> None:
        for accepted in tested_positions(drafted):
            self.add_trial(0, accepted)

    def add_tree(self, nodes: Sequence[TreeNode]) -> None:
        """At every node the path reached (and the root), its children in try order up to the accepted one."""
        reached = {-1} | {node.id for node in nodes if node.outcome == ACCEPTED}
        children: dict[int, list[TreeNode]] = {}
        for node in nodes:
            children.setdefault(node.parent, []).append(node)
        for parent in reached:
            for rank, child in enumerate(children.get(parent, [])):
                if child.outcome not in (ACCEPTED, "rejected"):
                    break  # clipped (the generation ended) or never tried
                self.add_trial(rank, child.outcome == ACCEPTED)
                if child.outcome == ACCEPTED:
                    break

    def rate(self, rank: int) -> float:
        return self.accepted[rank] / self.tried[rank] if rank < len(self.tried) and self.tried[rank] else 0.0

    def step_probabilities(self, ranks: int) -> list[float]:
        """Per sibling rank r < `ranks`: P_r · Π_{j<r} (1 − P_j), the chance that the r-th child is the one accepted."""
        steps, rejected_before = [], 1.0
        for rank in range(ranks):
            steps.append(rejected_before * self.rate(rank))
            rejected_before *= 1.0 - self.rate(rank)
        return steps


def expected_tree_tokens(rates: RankAcceptance, rank_paths: Mapping[tuple[int, ...], int], passes: int) -> float:
    """Tokens of `passes` tree passes under the rank-wise i.i.d. model: per pass 1 + the sum over its nodes of
    P(node accepted), the product of the step probabilities along the node's path; `rank_paths` counts the
    nodes' rank paths over the passes (§9.4)."""
    steps = rates.step_probabilities(1 + max((max(ranks) for ranks in rank_paths), default=0))
    return passes + sum(n * math.prod(steps[rank] for rank in ranks) for ranks, n in rank_paths.items())


@dataclass
class PositionAcceptance:
    """alpha_i = accepted at position i / tested at position i (§7.4)."""

    tested: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def add(self, drafted: Sequence[DraftedToken]) -> None:
        for i, accepted in enumerate(tested_positions(drafted)):
            if i == len(self.tested):
                self.tested.append(0)
                self.accepted.append(0)
            self.tested[i] += 1
            self.accepted[i] += accepted

    def rates(self) -> list[float | None]:
        return [a / t if t else None for a, t in zip(self.accepted, self.tested, strict=True)]


def rank_paths(nodes: Sequence[TreeNode]) -> list[tuple[int, ...]]:
    """Per node, the sibling ranks along its path (0 = tried first); nodes are listed parents first."""
    ranks: dict[int, tuple[int, ...]] = {-1: ()}
    next_rank: Counter[int] = Counter()
    for node in nodes:
        ranks[node.id] = ranks[node.parent] + (next_rank[node.parent],)
        next_rank[node.parent] += 1
    return [ranks[node.id] for node in nodes]


# ---- one generation ------------------------------------------------------------------------------

@dataclass
class GenerationStats:
    """Accumulates the passes of one request; every figure is cumulative over the request."""

    passes: int = 0
    tokens: int = 0
    elapsed_ms: float = 0.0
    verify_ms: float = 0.0
    acceptance: Acceptance = field(default_factory=Acceptance)
    positions: PositionAcceptance = field(default_factory=PositionAcceptance)
    draft_lengths: Counter[int] = field(default_factory=Counter)  # K' -> passes
    forward_ms: list[float] = field(default_factory=list)  # one-token target forwards: samples of t_T
    ranks: RankAcceptance = field(default_factory=RankAcceptance)  # P_r, for the tree model (§9.4)
    tree_rank_paths: Counter[tuple[int, ...]] = field(default_factory=Counter)  # tree passes: nodes' rank paths
    tree_passes: int = 0
    _drafted: int = 0  # drafted tokens of the drafting passes, clipped ones included (they cost draft time)
    _draft_ms: float = 0.0
    _drafting_passes: int = 0
    _drafting_verify_ms: float = 0.0
    _sorted_forward_ms: list[float] = field(default_factory=list)  # forward_ms in order, for its median per pass

    def add(self, event: PassEvent) -> None:
        self.add_pass(event.drafted, len(event.committed_ids), event.timing, event.tree)

    def add_pass(self, drafted: Sequence[DraftedToken], committed: int, timing: Timing,
                 tree: Sequence[TreeNode] | None = None) -> None:
        """Count one pass (the decoder calls this before its event exists, to put the totals in it).

        A tree pass's `drafted` is its main line (the path and the first rejected child at its end).
        """
        self.passes += 1
        self.tokens += committed
        self.elapsed_ms += timing.total_ms
        self.verify_ms += timing.verify_ms
        self.acceptance.add(drafted)
        self.positions.add(drafted)
        if tree:
            self.tree_passes += 1
            self.tree_rank_paths.update(rank_paths(tree))
            self.ranks.add_tree(tree)
        else:
            self.draft_lengths[len(drafted)] += 1
            self.ranks.add_chain(drafted)
        if drafted:
            self._drafted += len(tree) if tree else len(drafted)
            self._draft_ms += timing.draft_ms
        if timing.prompt_tokens:  # the forward also read the prompt: no sample of t_T or of v
            return
        if drafted:
            self._drafting_passes += 1
            self._drafting_verify_ms += timing.verify_ms
        else:
            self.add_forward(timing.verify_ms)  # a plain step: one target forward of one token

    def add_forward(self, ms: float) -> None:
        """A timed one-token target forward outside any pass (a sample of t_T)."""
        self.forward_ms.append(ms)
        if len(self._sorted_forward_ms) == len(self.forward_ms) - 1:
            bisect.insort(self._sorted_forward_ms, ms)

    @property
    def alpha(self) -> float | None:
        return self.acceptance.alpha

    @property
    def acceptance_rate(self) -> float | None:
        return self.acceptance.acceptance_rate

    def alpha_by_position(self) -> list[float | None]:
        return self.positions.rates()

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def expected_tokens_per_pass(self) -> float | None:
        """E(alpha, K_j) averaged over this run's passes; a tree pass counts its tree's expected value (§9.4)."""
        alpha = self.alpha
        if alpha is None:
            return None
        if not self.tree_passes:
            return mean_expected_tokens(alpha, self.draft_lengths)
        chain_passes = self.passes - self.tree_passes
        chain_tokens = mean_expected_tokens(alpha, self.draft_lengths) * chain_passes if chain_passes else 0.0
        tree_tokens = expected_tree_tokens(self.ranks, self.tree_rank_paths, self.tree_passes)
        return (chain_tokens + tree_tokens) / self.passes

    @property
    def target_forward_ms(self) -> float | None:
        """t_T: the median one-token target forward (kept sorted as it grows: a plain run adds one every pass)."""
        if len(self._sorted_forward_ms) != len(self.forward_ms):  # forward_ms was changed directly
            self._sorted_forward_ms = sorted(self.forward_ms)
        ordered, n = self._sorted_forward_ms, len(self._sorted_forward_ms)
        if not n:
            return None
        return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2

    @property
    def c(self) -> float | None:
        """t_D / t_T: draft time per drafted token over one target forward of one token (§6.2, §7.5)."""
        t_t = self.target_forward_ms
        if not self._drafted or not t_t:
            return None
        return (self._draft_ms / self._drafted) / t_t

    @property
    def verify_cost(self) -> float | None:
        """v = t_V / t_T: the mean verification forward of a drafting pass in one-token forwards."""
        t_t = self.target_forward_ms
        if not self._drafting_passes or not t_t:
            return None
        return (self._drafting_verify_ms / self._drafting_passes) / t_t

    @property
    def estimated_speedup(self) -> float | None:
        """tokens · t_T / time: a plain run's estimated time for these tokens over this run's time."""
        t_t = self.target_forward_ms
        if not t_t or not self.elapsed_ms:
            return None
        return self.tokens * t_t / self.elapsed_ms

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens / self.elapsed_ms if self.elapsed_ms else 0.0

    def snapshot(self) -> RunningStats:
        return RunningStats(alpha=self.alpha, tokens_per_pass=self.tokens_per_pass, c=self.c,
                            tokens_per_s=self.tokens_per_s, acceptance_rate=self.acceptance_rate,
                            expected_tokens_per_pass=self.expected_tokens_per_pass, verify_cost=self.verify_cost,
                            estimated_speedup=self.estimated_speedup, target_forward_ms=self.target_forward_ms)
