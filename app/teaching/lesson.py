"""A guided lesson on speculative decoding whose every sentence is written from a real run.

Each `LessonStep` names the settings it runs with and a function that reads
the finished run (`LessonRun`: its passes and end, plain engine events) and
returns an `Explanation`: the sentence, and the pass it points at, so the
window can highlight that pass and open its view. Nothing is canned: the
tokens, probabilities, times and statistics in a sentence are the ones of the
event it points at, and a step whose event did not occur says so.

Notation (docs/ALGORITHMS.md §2-§7): K drafts a pass; p the target's and q
the drafter's probability of a token; u the uniform draw a sampled draft is
tested with, kept iff u <= min(1, p/q); α the acceptance of E(α, K) =
(1 - α^(K+1)) / (1 - α) tokens a pass; c a drafted token's cost over one
target forward; the speedup estimate E(α, K) / (K c + 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.engine.core.stats import expected_tokens_per_pass, optimal_k, predicted_speedup
from app.engine.events import ACCEPTED, ASD_EXCEPTION, BONUS, REJECTED, RESAMPLED, EndEvent, PassEvent

LESSON_K = 4
LESSON_TOKENS = 48  # enough passes for every event a step looks for, few enough to read
TREE_BUDGET = 12
SECOND_DRAFTERS = ("eagle", "mtp", "medusa", "prompt-lookup", "ngram-cache")  # the first the models have
BRANCHING_DRAFTERS = ("draft-model", "eagle", "medusa")  # drafters that propose token trees


@dataclass(frozen=True)
class LessonRun:
    """A finished run as the lesson reads it: its settings (DecodeSettings.to_dict()), passes and end."""

    settings: dict
    passes: tuple[PassEvent, ...]
    end: EndEvent | None


@dataclass(frozen=True)
class Explanation:
    sentence: str
    pass_index: int | None = None  # the pass the sentence is about (None: the run as a whole)


@dataclass(frozen=True)
class LessonStep:
    key: str
    title: str
    view: str  # what the window shows beside the text: "inspector", "charts", "theory" or "asd"
    changes: dict = field(default_factory=dict)  # DecodeSettings changes of this step's run
    explain: Callable[[LessonRun, dict[str, LessonRun]], Explanation] = lambda run, runs: Explanation("")
    second_drafter: bool = False  # the run uses the first of SECOND_DRAFTERS the models have
    tree: bool = False  # the run drafts a token tree (with a drafter that branches)

    def settings_changes(self, available: Sequence[str]) -> dict:
        """The settings this step runs with, on models that offer `available` drafters."""
        changes = {"k": LESSON_K, "max_new_tokens": LESSON_TOKENS, "tree": None, "verify": "greedy",
                   "drafters": ("draft-model",), **self.changes}
        if self.second_drafter:
            changes["drafters"] = (next((d for d in SECOND_DRAFTERS if d in available), "prompt-lookup"),)
        if self.tree:
            changes["drafters"] = (next((d for d in BRANCHING_DRAFTERS if d in available), "draft-model"),)
            changes["tree"] = TREE_BUDGET
        return changes


def shown(text: str) -> str:
    """A token's text in quotes, with its line breaks and tabs visible."""
    return "“" + text.replace("\n", "↵").replace("\t", "⇥") + "”"


def _first(run: LessonRun, wanted: Callable[[PassEvent], bool]) -> PassEvent | None:
    return next((event for event in run.passes if wanted(event)), None)


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _drafter_name(event: PassEvent) -> str:
    return "the draft model" if event.drafter == "draft-model" else f"the {event.drafter} drafter"


# ---- the steps' sentences ---------------------------------------------------------------------------------
def explain_draft(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    event = _first(run, lambda e: len(e.drafted) >= 2)
    if event is None:
        return Explanation("No pass of this run drafted two tokens or more: try a longer prompt.")
    texts = ", ".join(shown(t.text) for t in event.drafted)
    return Explanation(
        f"Pass {event.index}: {_drafter_name(event)} guessed the next {len(event.drafted)} tokens ({texts}). "
        "That guess is the draft: cheap to make, and nothing of it is kept until the large target model "
        "has checked it.", event.index)


def explain_verification(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    event = _first(run, lambda e: len(e.drafted) >= 2 and e.timing.prompt_tokens == 0)
    if event is None:
        return Explanation("No pass after the first drafted two tokens or more, so there is no verification "
                           "to time in this run.")
    cost = run.end.stats.verify_cost if run.end is not None else None
    n = len(event.drafted)
    cost_words = ""
    if cost is not None:
        verdict = (f"checking {n} drafts together costs far less than {n} separate steps" if cost < n / 2 else
                   f"here that is not much cheaper than {n} separate steps, so drafting cannot pay much")
        cost_words = (f" Over this run one verification forward cost {cost:.2f} times an ordinary one-token step: "
                      f"{verdict}.")
    return Explanation(
        f"Pass {event.index}: the target read the last committed token and all {len(event.drafted)} drafts in "
        f"one forward pass ({event.timing.verify_ms:.1f} ms), and got its own prediction for every position "
        f"at once.{cost_words}", event.index)


def explain_greedy(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    event = _first(run, lambda e: any(t.outcome == REJECTED for t in e.drafted) and e.appended is not None)
    if event is None:
        return Explanation("Every draft of this run matched the target's choice: no rejection to show. "
                           "Try another prompt.")
    assert event.appended is not None
    kept = [t for t in event.drafted if t.outcome == ACCEPTED]
    rejected = next(t for t in event.drafted if t.outcome == REJECTED)
    kept_words = (f"{len(kept)} draft{'s' if len(kept) != 1 else ''} ({', '.join(shown(t.text) for t in kept)}) "
                  "matched the target's most likely token and were kept; " if kept else "")
    return Explanation(
        f"Pass {event.index}, greedy: a draft is kept only if it is the target's most likely token (argmax p). "
        f"{kept_words}{'the' if kept else 'The'} draft {shown(rejected.text)} was not "
        f"(p = {rejected.p:.3g} for it), so it and every draft after it were thrown away, and the target's "
        f"own token {shown(event.appended.text)} was appended instead.", event.index)


def explain_sampling(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    def tested(event: PassEvent) -> bool:
        return any(t.u is not None and t.accept_prob is not None and t.q is not None for t in event.drafted)

    event = _first(run, lambda e: tested(e) and any(t.outcome == REJECTED for t in e.drafted)) or _first(run, tested)
    if event is None:
        return Explanation("No draft of this run was tested by sampling (the drafter gave no probabilities).")
    token = next((t for t in event.drafted if t.outcome == REJECTED and t.u is not None),
                 next(t for t in event.drafted if t.u is not None))
    assert token.u is not None and token.accept_prob is not None and token.q is not None
    verdict = "kept" if token.outcome != REJECTED else "rejected"
    sentence = (f"Pass {event.index}, sampling: the draft {shown(token.text)} had q = {token.q:.3g} under the "
                f"drafter and p = {token.p:.3g} under the target. It is kept when u ≤ min(1, p/q) = "
                f"{token.accept_prob:.3f}; the draw was u = {token.u:.3f}, so it was {verdict}.")
    if verdict == "rejected" and event.appended is not None and event.appended.kind == RESAMPLED:
        sentence += (f" The replacement {shown(event.appended.text)} was drawn from the residual "
                     "norm(max(0, p − q)): what the target wants and the drafter under-offered, which makes the "
                     "output follow the target's distribution exactly.")
    return Explanation(sentence, event.index)


def explain_bonus(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    event = _first(run, lambda e: e.appended is not None and e.appended.kind == BONUS and len(e.drafted) > 0)
    if event is None:
        return Explanation("No pass of this run had all its drafts accepted, so no bonus token this time.")
    assert event.appended is not None
    n = len(event.drafted)
    return Explanation(
        f"Pass {event.index}: all {n} drafts were accepted, and the same target forward had already predicted "
        f"the position after them, so the bonus token {shown(event.appended.text)} came free: {n + 1} tokens "
        "from one target forward.", event.index)


def explain_theory(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    stats = run.end.stats if run.end is not None else None
    if stats is None or stats.alpha is None or not run.passes:
        return Explanation("This run drafted nothing, so it has no α.")
    k = run.passes[-1].k_setting or LESSON_K
    expected = expected_tokens_per_pass(stats.alpha, k)
    return Explanation(
        f"Over {len(run.passes)} passes the target accepted drafts at α = {stats.alpha:.2f}. Theory predicts "
        f"E(α, K) = (1 − α^(K+1)) / (1 − α) = {expected:.2f} tokens a pass at K = {k}; this run made "
        f"{stats.tokens_per_pass:.2f} (the last passes can be cut short by the token limit).")


def explain_best_k(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    stats = run.end.stats if run.end is not None else None
    if stats is None or stats.alpha is None or stats.c is None:
        return Explanation("This run has no measured α or drafter cost c, so there is no best K to compute.")
    alpha, c = stats.alpha, stats.c
    best = optimal_k(alpha, c, k_max=16)
    return Explanation(
        f"With α = {alpha:.2f} and a drafter costing c = {c:.3f} of a target forward per token, the estimated "
        f"speedup E(α, K) / (K c + 1) is {predicted_speedup(alpha, 1, c):.2f}x at K = 1, "
        f"{predicted_speedup(alpha, best, c):.2f}x at the best K = {best}, and "
        f"{predicted_speedup(alpha, 16, c):.2f}x at K = 16: longer drafts pay only while their tokens are "
        "likely to be accepted (α) and cheap to draft (c).")


def explain_second_drafter(run: LessonRun, runs: dict[str, LessonRun]) -> Explanation:
    first = runs.get("draft")
    stats = run.end.stats if run.end is not None else None
    name = run.settings.get("drafters", ("?",))[0] if run.settings.get("drafters") else "no drafter"
    if stats is None or stats.alpha is None:
        return Explanation(f"The {name} drafter proposed nothing on this prompt, so it has no α.")
    compare = ""
    if first is not None and first.end is not None and first.end.stats.alpha is not None:
        compare = (f" against α = {first.end.stats.alpha:.2f} and {first.end.stats.tokens_per_pass:.2f} for the "
                   "draft model")
    return Explanation(
        f"The same prompt with the {name} drafter: α = {stats.alpha:.2f} and {stats.tokens_per_pass:.2f} "
        f"tokens a pass{compare}. Greedy output is the same whichever drafter drafts; only the speed changes.")


def explain_tree(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    def branched(event: PassEvent) -> bool:
        return event.tree is not None and len({n.parent for n in event.tree}) < len(event.tree)

    event = _first(run, lambda e: branched(e) and bool(e.path)) or _first(run, branched)
    if event is None or event.tree is None:
        return Explanation("No pass of this run drafted a tree with more than one branch.")
    branches = sum(1 for node in event.tree if not any(other.parent == node.id for other in event.tree))
    return Explanation(
        f"Pass {event.index}: instead of one line of guesses, {_drafter_name(event)} drafted a token tree of "
        f"{len(event.tree)} nodes in {branches} branches, and the target checked all of them in one forward "
        f"(each node sees only its own ancestors). It accepted a path of {_tokens(len(event.path or ()))}.",
        event.index)


def explain_asd(run: LessonRun, _runs: dict[str, LessonRun]) -> Explanation:
    asd = run.end.asd if run.end is not None else None
    if asd is None:
        return Explanation("This run was not verified with ASD.")
    event = _first(run, lambda e: any(t.outcome == ASD_EXCEPTION for t in e.drafted))
    where = f" The first was in pass {event.index}." if event is not None else ""
    return Explanation(
        f"ASD accepted {asd.exceptions} mismatch{'es' if asd.exceptions != 1 else ''} on purpose, spending "
        f"{asd.spent:.2f} of its regret budget B = {asd.budget:g}; with the matches after them it kept "
        f"{asd.saved} drafts strict greedy would have thrown away. Faster, at a price: the text may now differ "
        f"from the target's own greedy text.{where}", event.index if event is not None else None)


STEPS = (
    LessonStep("draft", "1. What a draft is", "inspector", explain=explain_draft),
    LessonStep("verify", "2. One forward checks every draft", "inspector", explain=explain_verification),
    LessonStep("greedy", "3. Accept and reject under greedy", "inspector", explain=explain_greedy),
    LessonStep("sampling", "4. p, q, u and the residual under sampling", "inspector",
               changes={"verify": "sample"}, explain=explain_sampling),
    LessonStep("bonus", "5. The bonus token", "inspector", explain=explain_bonus),
    LessonStep("theory", "6. α and E(α, K) on the theory curve", "theory", explain=explain_theory),
    LessonStep("best-k", "7. Why the best K depends on α and c", "theory", explain=explain_best_k),
    LessonStep("second", "8. A second drafter", "charts", second_drafter=True, explain=explain_second_drafter),
    LessonStep("tree", "9. A token tree", "inspector", tree=True, explain=explain_tree),
    LessonStep("asd", "10. ASD's trade-off", "asd", changes={"verify": "asd"}, explain=explain_asd),
)


def explain_step(step: LessonStep, run: LessonRun, earlier: dict[str, LessonRun]) -> Explanation:
    return step.explain(run, earlier)
