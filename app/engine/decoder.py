"""The pass loop: draft, verify in ONE target forward, commit 1..K+1 tokens, crop caches.

Notation (ALGORITHMS.md): the committed sequence `ids` has N tokens (prompt and
generated); the target's cache holds all of them but the last. A pass drafts
K' <= K tokens `x`, feeds `[ids[-1], x_0 .. x_{K'-1}]` to the target, gets
logits (K'+1, V), accepts a prefix of length `a` by the verification rule,
appends one target token, and crops the target cache back to N + a.

Settings are read once per pass from a `LiveSettings` holder, and the stop,
pause and step requests of a `GenerationControl` are honoured between passes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch

from app.engine.cached_model import CachedModel
from app.engine.detok import StreamDetokenizer
from app.engine.drafters.base import Draft
from app.engine.drafters.registry import build_drafter, drafter_config
from app.engine.errors import ContextTooLongError, EngineError, OutOfMemoryError, is_out_of_memory, release_memory
from app.engine.events import (
    ACCEPTED, ASD_EXCEPTION, BONUS, CLIPPED, REJECTED, RESAMPLED, TARGET,
    AppendedToken, DraftedToken, EndEvent, Event, Ledger, NoticeEvent, PassDetail, PassEvent,
    ResidualEntry, StartEvent, Timing, TokenProb,
)
from app.engine.loading import LoadedModels, synchronize
from app.engine.sampling import TokenSampler
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings, SettingsError
from app.engine.stats import GenerationStats
from app.engine.verify import AsdVerdict, asd_charge, verify_asd, verify_greedy, verify_sampling

INSPECT_TOP = 8  # entries of p, q and the residual kept per row for the pass inspector


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
    passes: int = 0
    failed_drafters: set[str] = field(default_factory=set)
    notices: list[NoticeEvent] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return self.ids.numel() - self.n_prompt


@dataclass(frozen=True)
class _Verdict:
    """What the decoder needs from any verification rule."""

    n_accepted: int
    next_token: int
    target_ids: list[int]  # (K'+1,) argmax per row
    mismatch: list[bool] | None = None  # ASD only
    regret: list[float] | None = None
    accept_prob: list[float] | None = None  # sampling only
    u: list[float] | None = None
    residual: torch.Tensor | None = None
    asd: AsdVerdict | None = None  # kept whole: the ledger is charged only after clipping


def _top(probs: torch.Tensor) -> tuple[tuple[TokenProb, ...], ...]:
    """(R, V) -> R rows of the INSPECT_TOP most probable tokens."""
    values, indices = probs.topk(min(INSPECT_TOP, probs.shape[-1]), dim=-1)
    return tuple(tuple(TokenProb(i, v) for i, v in zip(row_i, row_v))
                 for row_i, row_v in zip(indices.tolist(), values.tolist()))


def _residual_detail(p_row: torch.Tensor, q_row: torch.Tensor | None, x: int,
                     residual: torch.Tensor) -> tuple[tuple[ResidualEntry, ...], float, float]:
    """The rejected row for the inspector: p, q, r on the union of the top tokens of each.

    Returns the entries (largest r first), the residual mass outside them and
    sum_v max(0, p_v - q_v) before normalising. (V,) rows; one-hot q when q_row is None.
    """
    p_row, residual = p_row.double().cpu(), residual.double().cpu()  # (V,)
    if q_row is None:
        q_row = torch.zeros_like(p_row)
        q_row[x] = 1.0
    q_row = q_row.double().cpu()  # (V,)
    k = min(INSPECT_TOP, p_row.numel())
    ids = torch.cat([row.topk(k).indices for row in (p_row, q_row, residual)]).unique()  # (<= 3 INSPECT_TOP,)
    entries = [ResidualEntry(i, p, q, r) for i, p, q, r in
               zip(ids.tolist(), p_row[ids].tolist(), q_row[ids].tolist(), residual[ids].tolist())
               if p or q or r]  # a warped (sparse) row pads its top with zeros: nothing to show there
    entries.sort(key=lambda e: (-e.r, -e.p, e.id))
    other = max(0.0, float(residual.sum() - residual[ids].sum()))
    norm = float((p_row - q_row).clamp(min=0.0).sum())
    return tuple(entries), other, norm


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
        self.target = CachedModel(models.target)
        self._drafters: dict[str, tuple[tuple, object]] = {}
        self._eos = models.eos_ids
        self._context_length = models.context_length

    # ---- public API -------------------------------------------------------------------------

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False) -> Iterator[Event]:
        """Validate the prompt now (raising SettingsError / ContextTooLongError), then stream events."""
        if isinstance(live, DecodeSettings):
            live = LiveSettings(live)
        prompt_ids = self.encode_prompt(prompt, chat_template)
        return self._run(prompt, prompt_ids, live, control or GenerationControl())

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
        if len(ids) >= limit:
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
        reason, error = None, None
        try:
            self._prefill(req)
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

    def _prefill(self, req: _Request) -> None:
        if req.ids.numel() > 1:
            self.target.advance_to(req.ids[:-1])

    def _describe_failure(self, exc: Exception) -> Exception:
        """Forget every cache (the next generation starts clean) and say what went wrong."""
        self.target.reset()
        self._drafters.clear()
        if is_out_of_memory(exc):
            release_memory(exc)
            return OutOfMemoryError("the device ran out of memory during a pass; memory was released. "
                                    "Lower K or max new tokens, or use a smaller model or dtype.")
        return exc

    def _drain_notices(self, req: _Request) -> Iterator[NoticeEvent]:
        while req.notices:
            yield req.notices.pop(0)

    # ---- one pass ---------------------------------------------------------------------------

    def _pass(self, req: _Request, settings: DecodeSettings) -> tuple[PassEvent | None, str | None]:
        """Run one pass; returns its event and the end reason if the generation is over."""
        room = self._context_length - 1 - req.ids.numel()  # positions left for new tokens after this one
        if room < 0:
            return None, "context_full"
        device = self.models.device
        t0 = time.perf_counter()
        k = self._draft_length(req, settings, room)
        if k:
            self._keep_target_features(req, settings)
        sampler = TokenSampler(settings.sampling if settings.verify == "sample" else None, req.generator)
        draft, drafter_name = self._draft(req, settings, k, sampler) if k else (None, None)
        drafts = draft.tokens if draft is not None else torch.empty(0, dtype=torch.long)  # (K',)
        synchronize(device)
        t1 = time.perf_counter()
        logits = self.target.advance_to(torch.cat([req.ids, drafts]))[-(drafts.numel() + 1):]  # (K'+1, V)
        synchronize(device)
        t2 = time.perf_counter()
        p = sampler.probs(logits)  # (K'+1, V): warped under sampling, plain softmax otherwise
        verdict = self._verify(settings, drafts.to(device), draft, logits, p, req)
        a_kept, next_token, reason = self._clip(req, drafts, verdict, settings)
        self.target.crop(req.ids.numel() + a_kept)
        asd_remaining = settings.asd.budget - req.spent if settings.verify == "asd" else None
        if settings.verify == "asd":
            req.spent += asd_charge(verdict.asd, a_kept)
            req.exceptions += sum(verdict.mismatch[:a_kept])
        event = self._pass_event(req, settings, drafter_name, k, drafts, draft, verdict, p, a_kept, next_token,
                                 asd_remaining, (t0, t1, t2))
        req.ids = torch.cat([req.ids, torch.tensor(event.committed_ids, dtype=torch.long)])
        self._adapt_k(req, settings, drafts.numel(), verdict.n_accepted)
        if reason is None and req.generated >= settings.max_new_tokens:
            reason = "max_tokens"
        return event, reason

    def _draft_length(self, req: _Request, settings: DecodeSettings, room: int) -> int:
        if settings.k != req.k_setting or not settings.adaptive_k:
            req.k, req.k_setting = settings.k, settings.k
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

    def _drafter(self, name: str, settings: DecodeSettings):
        config = drafter_config(name, self.models, settings.options)
        cached = self._drafters.get(name)
        if cached is None or cached[0] != config:
            cached = (config, build_drafter(name, self.models, settings.options))
            self._drafters[name] = cached
        return cached[1]

    def _keep_target_features(self, req: _Request, settings: DecodeSettings) -> None:
        """Keep the hidden states the chain's drafters read, and only those."""
        needed = set()
        for name in settings.drafters:
            if name not in req.failed_drafters:
                try:
                    needed.update(self._drafter(name, settings).feature_layers)
                except Exception as exc:  # noqa: BLE001 - reported like any drafter failure
                    self._drop_drafter(req, name, exc)
        if tuple(sorted(needed)) != self.target.feature_layers:
            self.target.keep_features(needed)
            self._prefill(req)

    def _features_for(self, drafter) -> list[torch.Tensor] | None:
        if not drafter.feature_layers:
            return None
        kept = self.target.feature_layers
        return [self.target.features[kept.index(layer)] for layer in drafter.feature_layers]

    def _draft(self, req: _Request, settings: DecodeSettings, k: int,
               sampler: TokenSampler) -> tuple[Draft | None, str | None]:
        """The first drafter of the chain that proposes something; failing drafters are skipped."""
        for name in settings.drafters:
            if name in req.failed_drafters:
                continue
            try:
                drafter = self._drafter(name, settings)
                draft = drafter.propose(req.ids, k, sampler, self._features_for(drafter))
            except Exception as exc:  # noqa: BLE001 - a broken drafter must not end the generation
                self._drop_drafter(req, name, exc)
                continue
            if draft is not None and len(draft):
                return Draft(draft.tokens[:k], None if draft.q is None else draft.q[:k]), name
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

    def _verify(self, settings: DecodeSettings, drafts: torch.Tensor, draft: Draft | None, logits: torch.Tensor,
                p: torch.Tensor, req: _Request) -> _Verdict:
        if settings.verify == "sample":
            u = torch.rand(drafts.numel(), generator=req.generator, device=logits.device)  # (K',)
            q = None if draft is None else draft.q
            v = verify_sampling(drafts, p, q, u, req.generator)
            return _Verdict(v.n_accepted, v.next_token, p.argmax(dim=-1).tolist(),
                            accept_prob=v.accept_prob.tolist(), u=u.tolist(), residual=v.residual)
        if settings.verify == "asd":
            asd = settings.asd
            v = verify_asd(drafts, logits, asd.budget - req.spent, asd.gate, asd.cap)
            return _Verdict(v.n_accepted, v.next_token, v.target_ids.tolist(), mismatch=v.mismatch.tolist(),
                            regret=v.regret.tolist(), asd=v)
        v = verify_greedy(drafts, logits)
        return _Verdict(v.n_accepted, v.next_token, v.target_ids.tolist())

    def _clip(self, req: _Request, drafts: torch.Tensor, verdict: _Verdict,
              settings: DecodeSettings) -> tuple[int, int | None, str | None]:
        """Accepted drafts kept, the appended token (None if the block ended the generation), end reason."""
        eos = self._eos
        accepted = drafts[: verdict.n_accepted].tolist()
        for i, token in enumerate(accepted):
            if token in eos:
                return i + 1, None, "eos"
        room = settings.max_new_tokens - req.generated
        if len(accepted) >= room:
            return room, None, "max_tokens"
        return len(accepted), verdict.next_token, ("eos" if verdict.next_token in eos else None)

    # ---- events -----------------------------------------------------------------------------

    def _pass_event(self, req, settings, drafter_name, k, drafts, draft, verdict, p, a_kept, next_token,
                    asd_remaining, times) -> PassEvent:
        t0, t1, t2 = times
        draft_ids = drafts.tolist()
        committed = draft_ids[:a_kept] + ([next_token] if next_token is not None else [])
        # Rejected drafts need their own decode; committed tokens are decoded once, as the stream advances.
        texts = req.detok.peek(draft_ids) if a_kept < len(draft_ids) else []
        committed_texts = req.detok.commit(committed)
        texts = committed_texts[:a_kept] + texts[a_kept:]
        rows = torch.arange(len(draft_ids), device=p.device)
        p_x = p[rows, drafts.to(p.device)].tolist() if draft_ids else []
        q_x = draft.q[rows.to(draft.q.device), drafts.to(draft.q.device)].tolist() \
            if draft is not None and draft.q is not None else [None] * len(draft_ids)
        drafted = tuple(
            DraftedToken(
                id=x, text=texts[i], q=q_x[i], p=p_x[i], target_id=verdict.target_ids[i],
                regret=None if verdict.regret is None else verdict.regret[i],
                outcome=self._outcome(i, a_kept, verdict),
                accept_prob=None if verdict.accept_prob is None else verdict.accept_prob[i],
                u=None if verdict.u is None else verdict.u[i],
            )
            for i, x in enumerate(draft_ids)
        )
        appended = None
        if next_token is not None:
            text = committed_texts[-1]
            kind = TARGET if not draft_ids else (BONUS if verdict.n_accepted == len(draft_ids) else RESAMPLED)
            appended = AppendedToken(next_token, text, kind, float(p[verdict.n_accepted, next_token]))
        residual, residual_other, residual_norm = (), 0.0, None
        if verdict.residual is not None:
            n = verdict.n_accepted
            q_row = None if draft.q is None else draft.q[n]
            residual, residual_other, residual_norm = _residual_detail(p[n], q_row, draft_ids[n], verdict.residual)
        asd = settings.asd if settings.verify == "asd" else None
        detail = PassDetail(
            p_top=_top(p),
            q_top=_top(draft.q) if draft is not None and draft.q is not None else (),
            asd_remaining=asd_remaining,
            residual=residual, residual_other=residual_other, residual_norm=residual_norm,
            asd_gate=None if asd is None else asd.gate, asd_cap=None if asd is None else asd.cap,
        )
        synchronize(self.models.device)
        t3 = time.perf_counter()
        timing = Timing(draft_ms=1e3 * (t1 - t0), verify_ms=1e3 * (t2 - t1), total_ms=1e3 * (t3 - t0))
        req.stats.add_pass(drafter_name, drafted, len(committed), timing)
        req.passes += 1
        return PassEvent(
            index=req.passes - 1, drafter=drafter_name, k=k, verify=settings.verify, drafted=drafted,
            appended=appended,
            ledger=Ledger(req.spent, settings.asd.budget if settings.verify == "asd" else 0.0, req.exceptions),
            timing=timing, position=req.generated, stats=req.stats.snapshot(), detail=detail,
        )

    @staticmethod
    def _outcome(i: int, a_kept: int, verdict: _Verdict) -> str:
        if i < a_kept:
            return ASD_EXCEPTION if verdict.mismatch is not None and verdict.mismatch[i] else ACCEPTED
        return CLIPPED if i < verdict.n_accepted else REJECTED

    def _start_event(self, prompt: str, req: _Request, settings: DecodeSettings) -> StartEvent:
        m = self.models
        return StartEvent(target=m.target_name, draft_model=m.draft_name, device=str(m.device),
                          dtype=str(m.dtype).removeprefix("torch."), settings=settings.to_dict(),
                          prompt_ids=tuple(req.ids.tolist()), prompt_text=prompt)

    def _end_event(self, req: _Request, reason: str, error: Exception | None, elapsed_s: float) -> EndEvent:
        generated = req.ids[req.n_prompt:].tolist()
        text = self.models.tokenizer.decode(generated, skip_special_tokens=True)
        return EndEvent(reason=reason, token_ids=tuple(generated), text=text, passes=req.passes,
                        elapsed_s=elapsed_s, stats=req.stats.snapshot(),
                        error=None if error is None else str(error),
                        error_type=None if error is None else type(error).__name__)
