"""KV-cache rollbacks equal a full recompute; token texts concatenate to the decoded text."""

from __future__ import annotations

import random

import pytest
import torch

from app.engine.cached_model import CachedModel, only_layers
from app.engine.detok import StreamDetokenizer
from app.engine.loading import load_models


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_gpt2"])
@pytest.mark.parametrize("layers", [None, (0, 1)])
def test_cached_logits_equal_full_recompute_after_random_rollbacks(request, arch, layers):
    target, _ = request.getfixturevalue(arch)
    model = load_models(str(target)).target
    cached = CachedModel(model, layers=layers)
    rng = random.Random(0)
    ids = torch.randint(1, 300, (12,))
    for _ in range(25):
        drafts = torch.randint(1, 300, (rng.randint(0, 5),))
        block = cached.advance_to(torch.cat([ids, drafts]))  # (T, V)
        accepted = rng.randint(0, drafts.numel())
        ids = torch.cat([ids, drafts[:accepted], torch.randint(1, 300, (1,))])
        with torch.inference_mode(), only_layers(model, layers):
            full = model(input_ids=cached.ids[None]).logits[0].float()  # (L, V)
        torch.testing.assert_close(block[-1], full[-1], atol=1e-4, rtol=1e-4)


def test_advance_to_feeds_only_the_new_tokens(tiny_llama):
    target, _ = tiny_llama
    cached = CachedModel(load_models(str(target)).target)
    ids = torch.arange(1, 11)
    assert cached.advance_to(ids).shape[0] == 10
    assert cached.advance_to(torch.cat([ids, torch.tensor([5, 6])])).shape[0] == 2
    cached.crop(4)
    assert cached.length == 4 and cached.advance_to(ids).shape[0] == 6


@pytest.mark.parametrize("text", ["plain ascii text", "Ünïcödé тест 漢字 🙂🙂 مرحبا", "a\u0301e\u0301 \u200f\u202e x",
                                  "tabs\tand\nnew\nlines  ", "\x01\x02 control"])
def test_stream_texts_concatenate_to_decoded_text(tiny_llama, text):
    tokenizer = load_models(str(tiny_llama[0])).tokenizer
    ids = tokenizer(text).input_ids
    stream = StreamDetokenizer(tokenizer, ids[:1])
    pieces = []
    rng = random.Random(1)
    rest = ids[1:]
    while rest:
        n = rng.randint(1, 3)
        assert stream.peek(rest[:n]) == stream.peek(rest[:n])
        pieces += stream.commit(rest[:n])
        rest = rest[n:]
    assert tokenizer.decode(ids[:1]) + "".join(pieces) == tokenizer.decode(ids)


def test_split_multibyte_character_waits_for_its_last_byte(tiny_llama):
    tokenizer = load_models(str(tiny_llama[0])).tokenizer
    byte_tokens = [tokenizer.convert_tokens_to_ids(t) for t in ("ð", "Ł", "Ļ", "Ĥ")]  # bytes of U+1F642
    stream = StreamDetokenizer(tokenizer, tokenizer("x").input_ids)
    assert stream.commit(byte_tokens[:2]) == ["", ""]
    assert stream.peek(byte_tokens[2:]) == ["", "🙂"]
    assert stream.commit(byte_tokens[2:]) == ["", "🙂"]
