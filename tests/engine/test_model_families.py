"""The engine on stand-ins of real checkpoints: every tokenizer family and architecture, built offline.

Tiny random models (tests/fixtures) of each architecture, beside the tokenizer family its real checkpoints
ship with: greedy identity against `model.generate` for every drafter, incremental detokenisation of
multilingual text, chat templates, EOS lists, padded vocabularies and layer skip.
"""

from __future__ import annotations

import random

import pytest
import torch

from app.engine.core.detok import StreamDetokenizer
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.registry import build_drafter
from app.engine.events import NoticeEvent
from app.engine.loading import load_models
from app.engine.loading.warm_up import warm_up_plan
from app.engine.settings import DecodeSettings, DrafterOptions, SettingsError
from tests.engine.conftest import compiles_counted
from tests.fixtures.architectures import ARCHITECTURES, available, build_model, build_pair
from tests.fixtures.tokenizer_families import FAMILIES, HARD_TEXT, build_family

PROMPT = "def add(a, b):\n    return a + b\n\ndef add("
NEW_TOKENS = 24
DRAFTER_SETS = (("draft-model",), ("prompt-lookup",), ("ngram-cache",), ("layer-skip",),
                ("prompt-lookup", "draft-model"))


@pytest.fixture(scope="session")
def families():
    built: dict = {}

    def get(name: str):
        if name not in built:
            built[name] = build_family(name)
        return built[name]
    return get


@pytest.fixture(scope="session")
def pairs(tmp_path_factory, families):
    """(target, draft) folders of one architecture, built once per session."""
    built: dict = {}

    def get(arch: str):
        reason = available(arch)
        if reason:
            pytest.skip(reason)
        if arch not in built:
            built[arch] = build_pair(tmp_path_factory.mktemp(arch), arch, family=families(ARCHITECTURES[arch]))
        return built[arch]
    return get


def hf_greedy(models, prompt_ids: list[int], max_new_tokens: int = NEW_TOKENS) -> list[int]:
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = models.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=max_new_tokens)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_greedy_identity_for_every_drafter(pairs, arch):
    target, draft = pairs(arch)
    models = load_models(str(target), str(draft), device="cpu", dtype="float32")
    assert models.num_layers == 2, "layer skip finds this architecture's layers"
    decoder = SpeculativeDecoder(models)
    reference = hf_greedy(models, decoder.encode_prompt(PROMPT))
    assert len(reference) == NEW_TOKENS
    wrong = {}
    for drafters in DRAFTER_SETS:
        end = list(decoder.generate(PROMPT, DecodeSettings(drafters=drafters, k=4, max_new_tokens=NEW_TOKENS)))[-1]
        if end.reason != "max_tokens" or list(end.token_ids) != reference:
            wrong[">".join(drafters)] = (end.reason, end.error, list(end.token_ids))
    assert not wrong, f"{arch}: greedy output differs from model.generate: {wrong}"


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_a_compiling_load_traces_each_model_twice_and_keeps_greedy_identity(pairs, arch):
    """Forwards of two rows or more share one graph with the row count a symbol: no architecture's code may
    specialise that dimension (a compile failure would fall back to eager forwards, with a notice)."""
    target, draft = pairs(arch)
    with compiles_counted() as counter:
        models = load_models(str(target), str(draft), device="cpu", compile=True)
        if not models.execution.compiles:  # a model the static cache cannot hold (sliding windows): eager, said so
            assert models.execution.cache == "dynamic" and models.execution.notices
            return
        assert models.execution.compile_failure is None
        compiled_models = len(warm_up_plan(models))
        assert counter.frame_count == 2 * compiled_models  # the one-token step, and every longer forward
        decoder = SpeculativeDecoder(models)
        reference = hf_greedy(models, decoder.encode_prompt(PROMPT))
        for drafters in (("draft-model",), ("layer-skip",), ("prompt-lookup",)):
            end = list(decoder.generate(PROMPT, DecodeSettings(drafters=drafters, k=4, max_new_tokens=NEW_TOKENS)))[-1]
            assert list(end.token_ids) == reference, (arch, drafters)
        assert counter.frame_count == 2 * compiled_models and models.execution.compile_failure is None


@pytest.mark.parametrize("family", FAMILIES)
def test_incremental_detokenisation_equals_decode(families, family):
    tokenizer = families(family).tokenizer
    rng = random.Random(0)
    for text in HARD_TEXT:
        ids = tokenizer(text)["input_ids"]
        cut = next(i for i in range(1, len(ids)) if not tokenizer.decode(ids[:i]).endswith("\ufffd"))
        head, rest = ids[:cut], ids[cut:]  # the prompt: whole characters, like any encoded text
        stream = StreamDetokenizer(tokenizer, head)
        pieces = []
        while rest:
            n = rng.randint(1, 4)
            assert stream.peek(rest[:n]) == stream.peek(rest[:n])
            pieces += stream.commit(rest[:n])
            rest = rest[n:]
        assert tokenizer.decode(head) + "".join(pieces) == tokenizer.decode(ids), (family, text)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_chat_template_applied_as_apply_chat_template(pairs, arch):
    models = load_models(str(pairs(arch)[0]), device="cpu", dtype="float32")
    tokenizer = models.tokenizer
    prompt = "Name three primes, please."
    messages = [{"role": "user", "content": prompt}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = SpeculativeDecoder(models).encode_prompt(prompt, chat_template=True)
    assert ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    if tokenizer.bos_token_id is not None:  # the template writes BOS itself: it must not be added twice
        assert ids.count(tokenizer.bos_token_id) == 1 and ids[0] == tokenizer.bos_token_id
    assert prompt in tokenizer.decode(ids)


def test_chat_template_refused_without_one(pairs):
    decoder = SpeculativeDecoder(load_models(str(pairs("gpt2")[0]), device="cpu", dtype="float32"))
    with pytest.raises(SettingsError, match="no chat template"):
        decoder.encode_prompt("hello", chat_template=True)


def test_generation_stops_at_any_of_several_eos_ids(pairs):
    """Llama 3 lists three EOS ids in generation_config: each ends the run where model.generate ends it."""
    target, draft = pairs("llama")
    models = load_models(str(target), str(draft), device="cpu", dtype="float32")
    assert models.eos_ids == frozenset(build_family("llama3").eos_ids) and len(models.eos_ids) == 3
    decoder = SpeculativeDecoder(models)
    prompt_ids = decoder.encode_prompt(PROMPT)
    plain = hf_greedy(models, prompt_ids)
    head = models.target.get_output_embeddings().weight
    for step, eos in zip((3, 7, 11), sorted(models.eos_ids - {models.tokenizer.eos_token_id}) + [
            models.tokenizer.eos_token_id], strict=True):
        saved = head[eos].clone()
        with torch.no_grad():  # EOS outscores the token greedy picks at `step` wherever that token wins
            head[eos] = 2.0 * head[plain[step]]
        try:
            reference = hf_greedy(models, prompt_ids)
            assert reference[-1] == eos and len(reference) < NEW_TOKENS
            for drafters in (("draft-model",), ("prompt-lookup",)):
                end = list(decoder.generate(PROMPT, DecodeSettings(drafters=drafters, k=4,
                                                                   max_new_tokens=NEW_TOKENS)))[-1]
                assert end.reason == "eos" and list(end.token_ids) == reference, (eos, drafters)
        finally:
            with torch.no_grad():
                head[eos] = saved


def test_padded_vocabulary_like_qwen(tmp_path, families):
    """Target and drafter padded past the tokenizer (Qwen2.5: 151,936 rows for 151,665 tokens)."""
    family = families("qwen2")
    vocab = len(family.tokenizer) + 64
    target = build_model(tmp_path / "target", "qwen2", family, layers=2, hidden=64, seed=5, vocab_size=vocab)
    draft = build_model(tmp_path / "draft", "qwen2", family, layers=1, hidden=32, seed=6, vocab_size=vocab)
    models = load_models(str(target), str(draft), device="cpu", dtype="float32")
    assert models.vocab_size == vocab > len(models.tokenizer)
    decoder = SpeculativeDecoder(models)
    reference = hf_greedy(models, decoder.encode_prompt(PROMPT))
    for drafters in (("draft-model",), ("layer-skip",)):
        end = list(decoder.generate(PROMPT, DecodeSettings(drafters=drafters, k=4, max_new_tokens=NEW_TOKENS)))[-1]
        assert list(end.token_ids) == reference, drafters


def test_layer_skip_says_why_when_the_layers_are_not_found(tmp_path, families):
    """MPT keeps its blocks under transformer.blocks, a layout layer skip does not know."""
    reason = available("mpt")
    if reason:
        pytest.skip(reason)
    from transformers import AutoConfig, AutoModelForCausalLM

    family = families("gpt2")
    config = AutoConfig.for_model("mpt", d_model=32, n_heads=4, n_layers=2, max_seq_len=64,
                                  vocab_size=len(family.tokenizer))
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    family.tokenizer.save_pretrained(tmp_path)
    models = load_models(str(tmp_path), device="cpu", dtype="float32")
    assert "layer-skip" not in models.available_drafters
    with pytest.raises(SettingsError, match=r"layer skip needs the target's list of decoder layers.*\(mpt\)"):
        build_drafter("layer-skip", models, DrafterOptions())
    events = list(SpeculativeDecoder(models).generate("hello", DecodeSettings(drafters=("layer-skip",),
                                                                              max_new_tokens=4)))
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]  # the run goes on without it, and says why
    assert events[-1].reason == "max_tokens" and any("decoder layers" in text for text in notices), notices
