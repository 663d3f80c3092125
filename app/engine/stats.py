"""Running statistics of a generation and the theory they are compared with.

Notation (docs/ALGORITHMS.md §6-§7): alpha is the probability that a drafted token is
accepted, K the number of drafts per pass, c the cost of one draft step
relative to one target forward.

    E(alpha, K)          = (1 - alpha^(K+1)) / (1 - alpha)      tokens per pass
    speedup(alpha, K, c) = E(alpha, K) / (K c + 1)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.engine.events import ACCEPTED, ASD_EXCEPTION, CLIPPED, DraftedToken, PassEvent, RunningStats, Timing


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


@dataclass
class _Counts:
    drafted: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


@dataclass
class GenerationStats:
    """Accumulates pass events; every figure is cumulative over the request."""

    passes: int = 0
    tokens: int = 0
    elapsed_ms: float = 0.0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    overall: _Counts = field(default_factory=_Counts)
    per_position: dict[int, _Counts] = field(default_factory=lambda: defaultdict(_Counts))
    _drafting_passes: int = 0
    _drafting_verify_ms: float = 0.0

    def add(self, event: PassEvent) -> None:
        self.add_pass(event.drafted, len(event.committed_ids), event.timing)

    def add_pass(self, drafted: Sequence[DraftedToken], committed: int, timing: Timing) -> None:
        """Count one pass (the decoder calls this before its event exists, to put the totals in it)."""
        self.passes += 1
        self.tokens += committed
        self.elapsed_ms += timing.total_ms
        self.verify_ms += timing.verify_ms
        judged = [t for t in drafted if t.outcome != CLIPPED]
        if judged:
            self.draft_ms += timing.draft_ms
            self._drafting_passes += 1
            self._drafting_verify_ms += timing.verify_ms
        for position, token in enumerate(judged):
            accepted = token.outcome in (ACCEPTED, ASD_EXCEPTION)
            for counts in (self.overall, self.per_position[position]):
                counts.drafted += 1
                counts.accepted += accepted

    @property
    def alpha(self) -> float | None:
        return self.overall.rate

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def c(self) -> float | None:
        """Mean draft time per drafted token over mean target verification time."""
        if not self.overall.drafted or not self._drafting_verify_ms:
            return None
        draft_per_token = self.draft_ms / self.overall.drafted
        verify_per_pass = self._drafting_verify_ms / self._drafting_passes
        return draft_per_token / verify_per_pass

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens / self.elapsed_ms if self.elapsed_ms else 0.0

    def alpha_by_position(self) -> list[float | None]:
        return [self.per_position[i].rate for i in sorted(self.per_position)]

    def snapshot(self) -> RunningStats:
        return RunningStats(alpha=self.alpha, tokens_per_pass=self.tokens_per_pass, c=self.c,
                            tokens_per_s=self.tokens_per_s)
