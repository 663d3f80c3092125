"""The pass loop: draft, verify in ONE target forward, commit 1..K+1 tokens, crop caches.

Notation (docs/ALGORITHMS.md §1-§2): the committed sequence `ids` has N tokens (prompt and
generated); the target's cache holds all of them but the last. A pass drafts
K' <= K tokens `x`, feeds `[ids[-1], x_0 .. x_{K'-1}]` to the target, gets
logits (K'+1, V), accepts a prefix of length `a` by the verification rule
(`verify.py`), keeps `a' <= a` of it (EOS, token limit), appends one target
token, and crops the target cache back to N + a'. `pass_events.py` turns the
block into the pass's event.

A request starts with nothing fed: its first chain pass reads the prompt in the
same forward as its own rows (`Timing.prompt_tokens`), as `generate` does; what
needs the target's cache before a pass (timed forwards, a drafter's target
features, a tree) feeds it first, outside the pass's draft time.

A chain pass waits for the device once: everything the rule and the event need
from the verification forward is gathered there and read back in one transfer
(`_read_block`), and the drafts reach the device before that forward is queued
(a copy to the device waits for the work queued before it). A tree pass also
waits inside its rule (tree.py), which walks the tree on the host.

Settings are read once per pass from a `LiveSettings` holder, and the stop,
pause and step requests of a `GenerationControl` are honoured between passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from app.engine.core.detok import StreamDetokenizer
from app.engine.core.sampling import TokenSampler
from app.engine.core.stats import GenerationStats
from app.engine.core.tree import TreeDraft, row_of, verification_parents, verify_tree_greedy, verify_tree_sampling
from app.engine.core.verify import (
    Ruling,
    Verdict,
    asd_charge,
    asd_reused,
    asd_ruling,
    asd_saved,
    fetch,
    greedy_ruling,
    sampling_ruling,
)
from app.engine.decoding.pass_events import (
    INSPECT_TOP,
    AsdBlockStart,
    Commit,
    PassClock,
    VerifiedBlock,
    appended_token,
    block_reads,
    drafted_tokens,
    inspection,
    main_line,
    pass_detail,
    token_texts,
    tree_block,
    tree_nodes,
    tree_reads,
)
from app.engine.drafters.base import Draft, Drafter, can_branch
from app.engine.drafters.registry import build_drafter, drafter_config
from app.engine.errors import ContextTooLongError, EngineError, OutOfMemoryError, is_out_of_memory, release_memory
from app.engine.events import (
    AsdSummary,
    EndEvent,
    EndReason,
    Event,
    ExecutionMode,
    Ledger,
    NoticeEvent,
    PassEvent,
    StartEvent,
    TreeNode,
)
from app.engine.loading import LoadedModels
from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.devices import synchronize
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings, SettingsError

Proposal = TypeVar("Proposal", Draft, TreeDraft)
TIMED_FORWARDS = 3  # one-token target forwards timed before the first draft of a request (t_T, §7.5)
NO_DRAFT = Draft(torch.empty(0, dtype=torch.long), None)  # K' = 0: the pass is one plain decoding step


@dataclass
class _Request:
    """Mutable state of one generation, owned by the decoder."""

    ids: torch.Tensor  # (N,) long on CPU: prompt + generated
    n_prompt: int
    generator: torch.Generator
    detok: StreamDetokenizer
    k: int  # current K (differs from the setting under adaptive K)
    k_setting: int
    stats: GenerationStats = field(default_factory=GenerationStats)
    spent: float = 0.0  # ASD ledger s
    exceptions: int = 0
    reused: int = 0  # ASD: matches kept after an exception (§5.6)
    saved: int = 0  # ASD: drafts kept beyond strict greedy on the same logits (§5.6)
    asd_budget: float | None = None  # B of the last ASD pass; None if no pass ran under ASD
    passes: int = 0
    failed_drafters: set[str] = field(default_factory=set)
    chains_only: bool = False  # the target cannot verify trees: tree settings draft chains (§9.3)
    notices: list[NoticeEvent] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return self.ids.numel() - self.n_prompt


def _require_encodable(prompt: str) -> None:
    """Refuse text the tokenizer cannot take: lone surrogates (e.g. undecodable bytes in a command line)."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SettingsError(
            f"the prompt holds characters that are not valid Unicode at position {exc.start} "
            f"({prompt[exc.start:exc.end]!r}), e.g. bytes in another encoding than UTF-8: "
            "remove them or save the text as UTF-8.") from None


class SpeculativeDecoder:
    """Runs generations on one pair of loaded models; not thread-safe (one generation at a time)."""

    def __init__(self, models: LoadedModels) -> None:
        self.models = models
        self.target = CachedModel(models.target, execution=models.execution, role="target")
        self._drafters: dict[str, tuple[tuple, Drafter]] = {}  # name -> (configuration, drafter)
        self._eos = models.eos_ids
        self._context_length = models.context_length
        self._timed_forward_ms: tuple[float, ...] = ()  # samples of t_T, timed once for these models (§7.5)

    # ---- public API -------------------------------------------------------------------------

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False) -> Iterator[Event]:
        """Validate the prompt now (raising SettingsError / ContextTooLongError), then stream events."""
        if isinstance(live, DecodeSettings):
            live = LiveSettings(live)
        prompt_ids = self.encode_prompt(prompt, chat_template)
        self._check_tree_budget(live.get(), len(prompt_ids))
        return self._run(prompt, prompt_ids, live, control or GenerationControl())

    def _check_tree_budget(self, settings: DecodeSettings, prompt_tokens: int) -> None:
        room = self._context_length - prompt_tokens
        if settings.tree is not None and settings.tree > room:
            raise SettingsError(f"the tree's node budget ({settings.tree}) is more than the context has left after "
                                f"the prompt ({room} tokens): lower the budget or shorten the prompt")

    def encode_prompt(self, prompt: str, chat_template: bool = False) -> list[int]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise SettingsError("the prompt is empty: type some text to continue")
        _require_encodable(prompt)
        tokenizer = self.models.tokenizer
        if chat_template:
            ids = self._apply_chat_template(prompt)
        else:
            ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        limit = self._context_length
        if len(ids) > limit:
            raise ContextTooLongError(
                f"the prompt has {len(ids)} tokens but the model's context holds {limit}; shorten the prompt.")
        return list(ids)

    def _apply_chat_template(self, prompt: str) -> list[int]:
        tokenizer = self.models.tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise SettingsError("this model's tokenizer has no chat template: switch the chat template option off")
        out = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True)
        return list(out["input_ids"] if isinstance(out, Mapping) else out)

    # ---- the loop ---------------------------------------------------------------------------

    def _run(self, prompt: str, prompt_ids: list[int], live: LiveSettings,
             control: GenerationControl) -> Iterator[Event]:
        settings = live.get()
        device = self.models.device
        generator = torch.Generator(device=device).manual_seed(settings.seed)
        req = _Request(torch.tensor(prompt_ids, dtype=torch.long), len(prompt_ids), generator,
                       StreamDetokenizer(self.models.tokenizer, prompt_ids), k=settings.k, k_setting=settings.k)
        started = time.perf_counter()
        yield self._start_event(prompt, req, settings)
        reason: EndReason | None = None
        error: Exception | None = None
        try:
            while reason is None:
                if not control.wait_for_turn():
                    reason = "stopped"
                    break
                event, reason = self._pass(req, live.get())
                yield from self._drain_notices(req)
                if event is not None:
                    yield event
        except Exception as exc:  # noqa: BLE001 - any failure ends the request with a visible reason
            reason, error = "error", self._describe_failure(exc)
        yield self._end_event(req, reason, error, time.perf_counter() - started)

    def _prefill(self, req: _Request) -> int:
        """Feed the committed tokens but the last, for what needs the target's cache before a pass (its timed
        forwards, its features for a drafter, a tree); how many were fed. A chain pass needs none: its forward
        reads whatever the cache lacks, the prompt in a cold request's first pass."""
        if req.ids.numel() < 2 or self.target.holds(req.ids[:-1]):
            return 0
        self.target.advance_to(req.ids[:-1], last=1)  # only the cache is wanted
        return self.target.last_fed

    def forget_caches(self) -> None:
        """Drop the target's and the drafters' caches: the next generation starts cold, sharing no prefix
        with the last one (a benchmark compares cold starts with peers that keep nothing between calls)."""
        self.target.reset()
        self._drafters.clear()

    def _describe_failure(self, exc: Exception) -> Exception:
        """Forget every cache (the next generation starts clean) and say what went wrong."""
        self.forget_caches()
        if is_out_of_memory(exc):
            release_memory(exc)
            return OutOfMemoryError("the device ran out of memory during a pass; memory was released. "
                                    "Lower K or max new tokens, or use a smaller model or dtype.")
        return exc

    def _drain_notices(self, req: _Request) -> Iterator[NoticeEvent]:
        said = self.models.execution.notices  # fallbacks of the static cache or of compiling (execution.py)
        while said:
            req.notices.append(NoticeEvent("warning", said.pop(0)))
        while req.notices:
            yield req.notices.pop(0)

    # ---- one pass ---------------------------------------------------------------------------

    def _pass(self, req: _Request, settings: DecodeSettings) -> tuple[PassEvent | None, EndReason | None]:
        """Draft K', verify in one target forward, commit a'+1 tokens; the event and the end reason if it ended."""
        # The target's positions 0 .. C-1 hold fed tokens; the token appended last is never fed, so the
        # sequence is full at C + 1 tokens. Feeding ids[-1] and K' drafts reaches position N - 1 + K' <= C - 1.
        room = self._context_length - req.ids.numel()  # K' at most
        if room < 0:
            return None, "context_full"
        k = self._draft_length(req, settings, room)
        if k and not req.stats.forward_ms:
            self._timed_forward_ms = self._timed_forward_ms or self._time_one_token_forwards(req)
            for ms in self._timed_forward_ms:
                req.stats.add_forward(ms)
        if k:  # a drafter's features of the prompt are computed before the clock starts: no draft time
            self._keep_target_features(req, settings)
        clock = PassClock(self.models.device)
        sampler = TokenSampler(settings.sampling if settings.verify == "sample" else None, req.generator,
                               settings.repetition, req.ids)
        if settings.tree is not None and k and self._can_verify_trees(req):
            return self._tree_pass(req, settings, k, min(settings.tree, room), sampler, clock)
        draft, drafter_name = self._draft(req, settings, k, sampler)  # x (K',), q (K', V) | None
        clock.mark_drafted()
        x = draft.tokens.to(self.models.device)  # (K',) copied before the forward is queued, not after it
        fed = torch.cat([req.ids, draft.tokens]) if len(draft) else req.ids
        self.target.crop(req.ids.numel() - 1)  # an earlier request's cache may hold the drafts: they are fed anyway
        logits = self.target.advance_to(fed, last=len(draft) + 1)
        if sampler.repetition.active:  # each row for its own context (§4.5)
            logits = sampler.process(logits, [x[:i] for i in range(len(draft) + 1)])
        clock.mark_verified()
        prompt_tokens = self.target.last_fed - (len(draft) + 1)  # > 0 in a cold request's first pass
        p = sampler.probs(logits)  # (K'+1, V): warped under sampling, plain softmax otherwise
        block = self._read_block(draft, x, p, self._verify(req, settings, x, draft.q, logits, p))
        commit, reason = self._clip(req, settings, block)
        self.target.crop(req.ids.numel() + commit.kept)
        asd = self._charge_ledger(req, settings, block.verdict, commit.kept)
        event = self._pass_event(req, settings, block, commit, asd, clock, drafter_name, k,
                                 prompt_tokens=prompt_tokens)
        return self._commit(req, settings, event, len(draft), block.verdict.n_accepted, reason)

    def _tree_pass(self, req: _Request, settings: DecodeSettings, depth: int, budget: int, sampler: TokenSampler,
                   clock: PassClock) -> tuple[PassEvent | None, EndReason | None]:
        """Draft a tree (at most `budget` nodes, `depth` levels), verify every node in one target forward with a
        tree mask, keep the accepted path's cache entries (§9)."""
        tree, drafter_name = self._draft_tree(req, settings, depth, budget, sampler)
        clock.mark_drafted()
        prompt_tokens = self._prefill(req)
        logits = self.target.extend_tree(torch.cat([req.ids[-1:], tree.tokens]), verification_parents(tree))  # (n+1, V)
        clock.mark_verified()
        if sampler.repetition.active:  # each row for its own path (§4.5)
            paths = [tree.tokens[:0]] + [tree.tokens[tree.path_to(node)] for node in range(len(tree))]
            logits = sampler.process(logits, paths)
        p = sampler.probs(logits)  # (n+1, V)
        verdict = verify_tree_greedy(tree, logits) if sampler.is_greedy else \
            verify_tree_sampling(tree, p, req.generator)
        line = main_line(tree, verdict)
        host = fetch(tree_reads(tree, verdict, p, line))  # the event's numbers, in one transfer
        block = tree_block(tree, verdict, line, host)
        commit, reason = self._clip(req, settings, block)
        self.target.keep_path([0] + [row_of(node) for node in verdict.path[: commit.kept]])
        nodes = tree_nodes(req.detok, tree, verdict, host, commit.kept) if len(tree) else None
        event = self._pass_event(req, settings, block, commit, None, clock, drafter_name, depth, nodes,
                                 verdict.path[: commit.kept] if nodes else None, prompt_tokens)
        return self._commit(req, settings, event, len(block.drafts), verdict.n_accepted, reason)

    def _commit(self, req: _Request, settings: DecodeSettings, event: PassEvent, drafted: int, accepted: int,
                reason: EndReason | None) -> tuple[PassEvent, EndReason | None]:
        """Append the pass's committed tokens, adapt K, and end the request at the token limit."""
        req.ids = torch.cat([req.ids, torch.tensor(event.committed_ids, dtype=torch.long)])
        self._adapt_k(req, settings, drafted, accepted)
        if reason is None and req.generated >= settings.max_new_tokens:
            reason = "max_tokens"
        return event, reason

    def _can_verify_trees(self, req: _Request) -> bool:
        """Whether the target takes a tree; if not, say so once and draft chains for the rest of the request."""
        problem = self.target.tree_problem()
        if problem is not None and not req.chains_only:
            req.chains_only = True
            req.notices.append(NoticeEvent("warning", f"{problem}: this generation drafts chains instead"))
        return problem is None

    def _draft_tree(self, req: _Request, settings: DecodeSettings, depth: int, budget: int,
                    sampler: TokenSampler) -> tuple[TreeDraft, str | None]:
        """The first drafter of the chain that proposes: a tree if it can branch, else its chain as a tree."""
        def propose(drafter: Drafter, features: list[torch.Tensor] | None) -> TreeDraft | None:
            if can_branch(drafter):
                return drafter.propose_tree(req.ids, depth, budget, sampler, features)  # type: ignore[attr-defined]
            draft = drafter.propose(req.ids, min(depth, budget), sampler, features)
            return None if draft is None else TreeDraft.chain(draft.tokens[:depth],
                                                              None if draft.q is None else draft.q[:depth])

        tree, name = self._first_proposal(req, settings, propose)
        return (tree, name) if tree is not None else (TreeDraft.chain(torch.empty(0, dtype=torch.long)), None)

    def _time_one_token_forwards(self, req: _Request) -> tuple[float, ...]:
        """TIMED_FORWARDS one-token target forwards in ms, samples of t_T (docs/ALGORITHMS.md §7.5).

        A drafting run may never take a plain step, so before the first draft these models make, the decoder
        feeds the last committed token alone, as a plain step would, and crops it off again (the cache is
        kept). Later requests reuse the samples: the forwards are paid once, not by every short run.
        """
        timed = []
        n = req.ids.numel()
        self._prefill(req)
        if self.target.compiled:  # a compiled step's first call compiles it: that is no sample of t_T
            self.target.advance_to(req.ids)
            self.target.crop(n - 1)
        for _ in range(TIMED_FORWARDS):
            synchronize(self.models.device)
            started = time.perf_counter()
            self.target.advance_to(req.ids)  # (1, V): one token fed
            synchronize(self.models.device)
            timed.append(1e3 * (time.perf_counter() - started))
            self.target.crop(n - 1)
        return tuple(timed)

    def _draft_length(self, req: _Request, settings: DecodeSettings, room: int) -> int:
        if settings.k != req.k_setting or not settings.adaptive_k:
            req.k, req.k_setting = settings.k, settings.k
        if settings.adaptive_k:  # adaptive K starts, and stays, within [k_min, k_max]
            req.k = min(max(req.k, settings.k_min), settings.k_max)
        remaining = settings.max_new_tokens - req.generated
        if not settings.drafters:
            return 0
        return max(0, min(req.k, room, remaining - 1))

    def _adapt_k(self, req: _Request, settings: DecodeSettings, drafted: int, accepted: int) -> None:
        if not settings.adaptive_k or drafted == 0:
            return
        if accepted == drafted:
            req.k = min(req.k + 2, settings.k_max)
        else:
            req.k = max(req.k - 1, settings.k_min)

    def _drafter(self, name: str, settings: DecodeSettings) -> Drafter:
        config = drafter_config(name, self.models, settings.options)
        cached = self._drafters.get(name)
        if cached is None or cached[0] != config:
            cached = (config, build_drafter(name, self.models, settings.options))
            self._drafters[name] = cached
        return cached[1]

    def _keep_target_features(self, req: _Request, settings: DecodeSettings) -> None:
        """Keep the hidden states the chain's drafters read, and only those."""
        needed: set[int] = set()
        for name in settings.drafters:
            if name not in req.failed_drafters:
                try:
                    needed.update(self._drafter(name, settings).feature_layers)
                except Exception as exc:  # noqa: BLE001 - reported like any drafter failure
                    self._drop_drafter(req, name, exc)
        if tuple(sorted(needed)) != self.target.feature_layers:
            self.target.keep_features(needed)
        if needed:  # the drafters read the target's features of every committed token but the last
            self._prefill(req)

    def _features_for(self, drafter: Drafter) -> list[torch.Tensor] | None:
        if not drafter.feature_layers:
            return None
        kept = self.target.feature_layers
        return [self.target.features[kept.index(layer)] for layer in drafter.feature_layers]

    def _draft(self, req: _Request, settings: DecodeSettings, k: int,
               sampler: TokenSampler) -> tuple[Draft, str | None]:
        """The first drafter of the chain that proposes something (none: an empty draft); failing ones are skipped."""
        if k == 0:
            return NO_DRAFT, None
        draft, name = self._first_proposal(
            req, settings, lambda drafter, features: drafter.propose(req.ids, k, sampler, features))
        if draft is None:
            return NO_DRAFT, None
        return Draft(draft.tokens[:k], None if draft.q is None else draft.q[:k]), name

    def _first_proposal(self, req: _Request, settings: DecodeSettings,
                        propose: Callable[[Drafter, list[torch.Tensor] | None], Proposal | None],
                        ) -> tuple[Proposal | None, str | None]:
        """What the first drafter of the chain that proposes something proposed, and its name; a drafter that
        fails is reported and skipped for the rest of the request."""
        self._keep_target_features(req, settings)
        for name in settings.drafters:
            if name in req.failed_drafters:
                continue
            try:
                drafter = self._drafter(name, settings)
                proposal = propose(drafter, self._features_for(drafter))
            except Exception as exc:  # noqa: BLE001 - a broken drafter must not end the generation
                self._drop_drafter(req, name, exc)
                continue
            if proposal is not None and len(proposal):
                return proposal, name
        return None, None

    def _drop_drafter(self, req: _Request, name: str, exc: Exception) -> None:
        req.failed_drafters.add(name)
        self._drafters.pop(name, None)  # its cache goes with it
        if is_out_of_memory(exc):
            release_memory(exc)
            detail = "out of memory; its memory was released"
        elif isinstance(exc, EngineError | SettingsError):
            detail = str(exc)
        else:
            detail = f"{type(exc).__name__}: {exc}"
        req.notices.append(NoticeEvent("warning", f"drafter {name} failed and is skipped for this generation "
                                                  f"({detail})"))

    def _verify(self, req: _Request, settings: DecodeSettings, x: torch.Tensor, q: torch.Tensor | None,
                logits: torch.Tensor, p: torch.Tensor) -> Ruling:
        """The rule's device work for drafts x (K',) on the device; nothing is read back yet."""
        if settings.verify == "sample":
            u = torch.rand(x.numel(), generator=req.generator, device=logits.device)  # (K',)
            return sampling_ruling(x, p, q, u, req.generator)
        if settings.verify == "asd":
            asd = settings.asd
            return asd_ruling(x, logits, asd.budget - req.spent, asd.gate, asd.cap)
        return greedy_ruling(x, logits, top=INSPECT_TOP)  # the inspector's rows found in the same search

    def _read_block(self, draft: Draft, x: torch.Tensor, p: torch.Tensor, ruling: Ruling) -> VerifiedBlock:
        """The pass's one read: what the rule still needs and what the event shows, in one transfer."""
        host = fetch(ruling.reads | block_reads(x, p, draft.q, ruling.candidates, ruling.rejection, ruling.top_ids))
        verdict = ruling.finish(host)
        return VerifiedBlock(draft.tokens, verdict, inspection(host, verdict.residual is not None))

    def _clip(self, req: _Request, settings: DecodeSettings, block: VerifiedBlock) -> tuple[Commit, EndReason | None]:
        """Keep the accepted drafts up to EOS and the token limit; append the target's token unless that ended it."""
        accepted = block.draft_ids[: block.verdict.n_accepted]
        for i, token in enumerate(accepted):
            if token in self._eos:
                return Commit(i + 1, None), "eos"
        room = settings.max_new_tokens - req.generated
        if len(accepted) >= room:
            return Commit(room, None), "max_tokens"
        next_token = block.verdict.next_token
        return Commit(len(accepted), next_token), ("eos" if next_token in self._eos else None)

    def _charge_ledger(self, req: _Request, settings: DecodeSettings, verdict: Verdict,
                       kept: int) -> AsdBlockStart | None:
        """ASD: s += regret of the kept exceptions; returns the ledger as it stood at block start."""
        if settings.verify != "asd":
            return None
        start = AsdBlockStart(remaining=settings.asd.budget - req.spent, settings=settings.asd)
        req.spent += asd_charge(verdict, kept)
        req.exceptions += sum(verdict.is_exception(i) for i in range(kept))
        req.reused += asd_reused(verdict, kept)
        req.saved += asd_saved(verdict, kept)
        req.asd_budget = settings.asd.budget
        return start

    # ---- events -----------------------------------------------------------------------------

    def _pass_event(self, req: _Request, settings: DecodeSettings, block: VerifiedBlock, commit: Commit,
                    asd: AsdBlockStart | None, clock: PassClock, drafter_name: str | None, k: int,
                    tree: tuple[TreeNode, ...] | None = None, path: tuple[int, ...] | None = None,
                    prompt_tokens: int = 0) -> PassEvent:
        texts, appended_text = token_texts(req.detok, block, commit)
        drafted = drafted_tokens(block, commit, texts)
        appended = appended_token(block, commit, appended_text)
        detail = pass_detail(block, commit, asd)
        timing = clock.timing(prompt_tokens)  # the whole pass, event building included
        req.stats.add_pass(drafted, len(commit.ids(block)), timing, tree)
        req.passes += 1
        ledger = Ledger(req.spent, 0.0 if asd is None else asd.settings.budget, req.exceptions)
        return PassEvent(index=req.passes - 1, drafter=drafter_name, k=k, verify=settings.verify, drafted=drafted,
                         appended=appended, ledger=ledger, timing=timing, position=req.generated,
                         stats=req.stats.snapshot(), detail=detail, k_setting=req.k_setting,
                         asd_reused=None if asd is None else asd_reused(block.verdict, commit.kept),
                         asd_saved=None if asd is None else asd_saved(block.verdict, commit.kept),
                         tree=tree, path=path)

    def _start_event(self, prompt: str, req: _Request, settings: DecodeSettings) -> StartEvent:
        m = self.models
        return StartEvent(target=m.target_name, draft_model=m.draft_name, device=str(m.device),
                          dtype=str(m.dtype).removeprefix("torch."), settings=settings.to_dict(),
                          prompt_ids=tuple(req.ids.tolist()), prompt_text=prompt,
                          execution=ExecutionMode("static" if self.target.static else "dynamic", self.target.compiled))

    def _end_event(self, req: _Request, reason: EndReason, error: Exception | None, elapsed_s: float) -> EndEvent:
        generated = req.ids[req.n_prompt:].tolist()
        text = self.models.tokenizer.decode(generated, skip_special_tokens=True)
        assert isinstance(text, str), "one sequence of ids decodes to one string (a list is for a batch)"
        return EndEvent(reason=reason, token_ids=tuple(generated), text=text, passes=req.passes,
                        elapsed_s=elapsed_s, stats=req.stats.snapshot(),
                        error=None if error is None else str(error),
                        error_type=None if error is None else type(error).__name__, asd=self._asd_summary(req))

    def _asd_summary(self, req: _Request) -> AsdSummary | None:
        """What ASD bought over the request (§5.6): passes saved = passes * saved / (tokens - saved)."""
        if req.asd_budget is None:
            return None
        tokens = req.stats.tokens
        strict_tokens = tokens - req.saved  # what strict greedy would have committed in the same passes
        passes_saved = req.passes * req.saved / strict_tokens if strict_tokens > 0 else 0.0
        return AsdSummary(exceptions=req.exceptions, spent=req.spent, budget=req.asd_budget,
                          remaining=req.asd_budget - req.spent, reused=req.reused, saved=req.saved,
                          passes_saved=passes_saved)
