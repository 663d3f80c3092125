"""The pass loop: draft, verify in ONE target forward, commit 1..K+1 tokens, crop caches.

Notation (docs/ALGORITHMS.md §1-§2): the committed sequence `ids` has N tokens (prompt and
generated); the target's cache holds all of them but the last. A pass drafts
K' <= K tokens `x`, feeds `[ids[-1], x_0 .. x_{K'-1}]` to the target, gets
logits (K'+1, V), accepts a prefix of length `a` by the verification rule
(`rules.py` over `verify.py`), keeps `a' <= a` of it (EOS, token limit), appends one target
token, and crops the target cache back to N + a'. A tree pass (§9) does the same
with a tree of drafts (`blocks.py` holds both shapes); `pass_events.py` turns the
block into the pass's event.

One pass, in `_pass`, is six steps:

1. draft: the first drafter of the chain that proposes (`drafters/chain.py`);
2. verify in one target forward;
3. read once: what the rule and the event need comes back in one transfer;
4. clip: at EOS and the token limit;
5. keep: the committed rows in the target's cache, the kept block in the rule's ledger (ASD);
6. event: the pass as plain data, and the committed tokens appended.

A request starts with nothing fed: its first chain pass reads the prompt in the
same forward as its own rows (`Timing.prompt_tokens`), as `generate` does; what
needs the target's cache before a pass (timed forwards, a drafter's target
features, a tree) feeds it first, outside the pass's draft time.

Settings are read once per pass from a `LiveSettings` holder, and the stop,
pause and step requests of a `GenerationControl` are honoured between passes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from app.engine.core.detok import StreamDetokenizer
from app.engine.core.rules import AsdBlockStart, Rules
from app.engine.core.sampling import TokenSampler
from app.engine.core.stats import GenerationStats
from app.engine.core.verify import asd_reused, asd_saved
from app.engine.decoding.blocks import Block, ChainBlock, TreeBlock
from app.engine.decoding.pass_events import (
    Commit,
    PassClock,
    Stopwatch,
    VerifiedBlock,
    appended_token,
    drafted_tokens,
    pass_detail,
    token_texts,
)
from app.engine.decoding.prompt import check_tree_budget, encode_prompt
from app.engine.drafters.chain import DrafterChain
from app.engine.errors import OutOfMemoryError, is_out_of_memory, release_memory
from app.engine.events import EndEvent, EndReason, Event, ExecutionMode, NoticeEvent, PassEvent, StartEvent
from app.engine.loading import LoadedModels
from app.engine.runtime.cached_model import CachedModel
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings

TIMED_FORWARDS = 3  # one-token target forwards timed before the first draft of a request (t_T, §7.5)


@dataclass
class _Request:
    """Mutable state of one generation, owned by the decoder."""

    ids: torch.Tensor  # (N,) long on CPU: prompt + generated
    n_prompt: int
    generator: torch.Generator
    detok: StreamDetokenizer
    rules: Rules
    k: int  # current K (differs from the setting under adaptive K)
    k_setting: int
    inspect: bool  # gather the inspector's detail (the top of p and q, the residual)
    timed_forwards: Stopwatch | None = None  # samples of t_T taken this pass, added to `stats` at its event
    stats: GenerationStats = field(default_factory=GenerationStats)
    passes: int = 0
    chains_only: bool = False  # the target cannot verify trees: tree settings draft chains (§9.3)
    notices: list[NoticeEvent] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return self.ids.numel() - self.n_prompt

    def warn(self, message: str) -> None:
        self.notices.append(NoticeEvent("warning", message))


class SpeculativeDecoder:
    """Runs generations on one pair of loaded models; not thread-safe (one generation at a time)."""

    def __init__(self, models: LoadedModels) -> None:
        self.models = models
        self.target = CachedModel(models.target, execution=models.execution, role="target")
        self.chain = DrafterChain(models, self.target)
        self._eos = models.eos_ids
        self._context_length = models.context_length
        self._timed_forward_ms: tuple[float, ...] = ()  # samples of t_T, timed once for these models (§7.5)

    # ---- public API -------------------------------------------------------------------------

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False, inspect: bool = True) -> Iterator[Event]:
        """Validate the prompt now (raising SettingsError / ContextTooLongError), then stream events.

        `inspect=False` leaves the inspector's detail out of the pass events (empty tops, no residual): a
        consumer that never shows it (a benchmark, a plain-text run) does not pay for it.
        """
        if isinstance(live, DecodeSettings):
            live = LiveSettings(live)
        prompt_ids = self.encode_prompt(prompt, chat_template)
        check_tree_budget(live.get(), len(prompt_ids), self._context_length)
        return self._run(prompt, prompt_ids, live, control or GenerationControl(), inspect)

    def encode_prompt(self, prompt: str, chat_template: bool = False) -> list[int]:
        return encode_prompt(self.models.tokenizer, prompt, self._context_length, chat_template)

    def forget_caches(self) -> None:
        """Drop the target's and the drafters' caches: the next generation starts cold, sharing no prefix
        with the last one (a benchmark compares cold starts with peers that keep nothing between calls)."""
        self.target.reset()
        self.chain.forget()

    # ---- the loop ---------------------------------------------------------------------------

    def _run(self, prompt: str, prompt_ids: list[int], live: LiveSettings, control: GenerationControl,
             inspect: bool) -> Iterator[Event]:
        settings = live.get()
        generator = torch.Generator(device=self.models.device).manual_seed(settings.seed)
        req = _Request(torch.tensor(prompt_ids, dtype=torch.long), len(prompt_ids), generator,
                       StreamDetokenizer(self.models.tokenizer, prompt_ids), Rules(generator), k=settings.k,
                       k_setting=settings.k, inspect=inspect)
        self.chain.begin_request(req.warn)
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
            req.warn(said.pop(0))
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
        if k:  # t_T and a drafter's features of the prompt are measured before the clock starts: no draft time
            self._time_one_token_forwards(req)
            self.chain.keep_target_features(req.ids, settings)
        clock = PassClock(self.models.device)
        sampler = TokenSampler(settings.sampling if settings.verify == "sample" else None, req.generator,
                               settings.repetition, req.ids)
        rule = req.rules.pick(settings)
        block = self._draft(req, settings, k, room, sampler)                 # 1. draft
        clock.mark_drafted()
        logits = block.verify(self.target, req.ids, sampler)                  # 2. verify in one forward
        clock.mark_verified()
        p = sampler.probs(logits)  # (rows, V): warped under sampling, plain softmax otherwise
        verified = block.read(rule, logits, p, req.inspect)                   # 3. read once
        commit, reason = self._clip(req, settings, verified)                  # 4. clip
        block.keep(self.target, req.ids, commit)                              # 5. keep
        asd = rule.charge(verified.verdict, commit.kept)
        event = self._pass_event(req, settings, block, verified, commit, asd, clock)  # 6. event
        return event, self._commit(req, settings, event, verified, reason)

    def _draft(self, req: _Request, settings: DecodeSettings, k: int, room: int, sampler: TokenSampler) -> Block:
        """A tree when the settings ask for one and the target takes it, else a chain of at most k drafts."""
        if settings.tree is not None and k and self._can_verify_trees(req):
            return TreeBlock.drafted(self.chain, req.ids, settings, k, min(settings.tree, room), sampler,
                                     self.models.device)
        return ChainBlock.drafted(self.chain, req.ids, settings, k, sampler, self.models.device)

    def _can_verify_trees(self, req: _Request) -> bool:
        """Whether the target takes a tree; if not, say so once and draft chains for the rest of the request."""
        problem = self.target.tree_problem()
        if problem is not None and not req.chains_only:
            req.chains_only = True
            req.warn(f"{problem}: this generation drafts chains instead")
        return problem is None

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

    def _commit(self, req: _Request, settings: DecodeSettings, event: PassEvent, block: VerifiedBlock,
                reason: EndReason | None) -> EndReason | None:
        """Append the pass's committed tokens, adapt K, and end the request at the token limit."""
        req.ids = torch.cat([req.ids, torch.tensor(event.committed_ids, dtype=torch.long)])
        self._adapt_k(req, settings, len(block.draft_ids), block.verdict.n_accepted)
        if reason is None and req.generated >= settings.max_new_tokens:
            reason = "max_tokens"
        return reason

    def _time_one_token_forwards(self, req: _Request) -> None:
        """TIMED_FORWARDS one-token target forwards, samples of t_T (docs/ALGORITHMS.md §7.5), read at the event.

        A drafting run may never take a plain step, so before the first draft these models make, the decoder
        feeds the last committed token alone, as a plain step would, and crops it off again (the cache is
        kept). Later requests reuse the samples: the forwards are paid once, not by every short run. On a CUDA
        device they are timed with events, read after the pass's one read: timing them stalls nothing.
        """
        if req.stats.forward_ms:
            return
        req.timed_forwards = stopwatch = Stopwatch(self.models.device)
        if self._timed_forward_ms:
            return
        n = req.ids.numel()
        self.target.prefill(req.ids)
        if self.target.compiled:  # a compiled step's first call compiles it: that is no sample of t_T
            self.target.advance_to(req.ids)
            self.target.crop(n - 1)
        for _ in range(TIMED_FORWARDS):
            stopwatch.start()
            self.target.advance_to(req.ids)  # (1, V): one token fed
            stopwatch.stop()
            self.target.crop(n - 1)

    def _add_timed_forwards(self, req: _Request) -> None:
        """The samples of t_T into the request's statistics, once the pass's read has waited for them."""
        if req.timed_forwards is None:
            return
        self._timed_forward_ms = self._timed_forward_ms or tuple(req.timed_forwards.samples_ms())
        for ms in self._timed_forward_ms:
            req.stats.add_forward(ms)
        req.timed_forwards = None

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

    # ---- events -----------------------------------------------------------------------------

    def _pass_event(self, req: _Request, settings: DecodeSettings, block: Block, verified: VerifiedBlock,
                    commit: Commit, asd: AsdBlockStart | None, clock: PassClock) -> PassEvent:
        tree, path = block.nodes(req.detok, commit)  # peeked before the texts advance the stream
        texts, appended_text = token_texts(req.detok, verified, commit)
        drafted = drafted_tokens(verified, commit, texts)
        appended = appended_token(verified, commit, appended_text)
        detail = pass_detail(verified, commit, asd)
        timing = clock.timing(block.prompt_tokens)  # the whole pass, event building included
        self._add_timed_forwards(req)
        req.stats.add_pass(drafted, len(commit.ids(verified)), timing, tree)
        req.passes += 1
        return PassEvent(index=req.passes - 1, drafter=block.drafter, k=block.k, verify=settings.verify,
                         drafted=drafted, appended=appended, ledger=req.rules.asd.ledger(asd), timing=timing,
                         position=req.generated, stats=req.stats.snapshot(), detail=detail,
                         k_setting=req.k_setting,
                         asd_reused=None if asd is None else asd_reused(verified.verdict, commit.kept),
                         asd_saved=None if asd is None else asd_saved(verified.verdict, commit.kept),
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
                        error_type=None if error is None else type(error).__name__,
                        asd=req.rules.asd.summary(req.passes, req.stats.tokens),
                        acceptance=req.stats.acceptance_summary())
