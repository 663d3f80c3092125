"""KV-cache rollbacks equal a full recompute; token texts concatenate to the decoded text."""

from __future__ import annotations

import random

import pytest
import torch

from app.engine.core.detok import StreamDetokenizer
from app.engine.loading import load_models
from app.engine.runtime.cached_model import CachedModel, only_layers


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


def counting_decodes(stream: StreamDetokenizer) -> list[int]:
    """Route the stream's decodes through a counter: one entry per call, the number of sequences decoded."""
    calls: list[int] = []
    decode = stream._decode_all  # noqa: SLF001 - the one call a pass's texts are decoded in

    def counted(sequences):
        calls.append(len(sequences))
        return decode(sequences)
    stream._decode_all = counted  # noqa: SLF001
    return calls


def test_a_pass_decodes_once_its_committed_tokens_and_rejected_drafts(tiny_llama):
    tokenizer = load_models(str(tiny_llama[0])).tokenizer
    ids = tokenizer("The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun.").input_ids
    stream, twin = StreamDetokenizer(tokenizer, ids[:3]), StreamDetokenizer(tokenizer, ids[:3])
    calls = counting_decodes(stream)
    rng = random.Random(2)
    rest, passes = ids[3:], 0
    while rest:
        n = rng.randint(1, min(4, len(rest)))
        kept = n - 1  # the drafts kept; the last committed token is the target's
        rejected = [rng.randrange(300, 400) for _ in range(rng.randint(0, 3))]
        peeked = twin.peek(rest[:kept] + rejected)[kept:]  # what the drafts alone would have shown
        assert stream.commit_block(rest[:n], kept, rejected) == (twin.commit(rest[:n]), peeked)
        rest, passes = rest[n:], passes + 1
    assert len(calls) == passes  # one decode call per pass, the window's own decode included


def test_the_window_moves_back_off_a_character_cut_by_its_usual_start():
    from tests.fixtures.tokenizer_families import build_family

    tokenizer = build_family("sentencepiece").tokenizer  # byte fallback: a character outside the vocabulary is
    ids = tokenizer("x \U0001f980 abc def ghi jkl").input_ids  # spelt in byte tokens, 4 for this crab
    first = next(i for i, t in enumerate(tokenizer.convert_ids_to_tokens(ids)) if t == "<0xF0>")
    assert tokenizer.convert_ids_to_tokens(ids[first: first + 4]) == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x80>"]
    emitted = first + 4 + 4  # WINDOW (6) tokens back from here is the crab's third byte
    stream = StreamDetokenizer(tokenizer, ids[:emitted])
    calls = counting_decodes(stream)
    pieces = stream.commit(ids[emitted: emitted + 2])
    assert len(calls) == 3  # the usual window, the earlier starts, the window that starts on the crab
    pieces += stream.commit(ids[emitted + 2:])
    assert len(calls) == 4  # past the crab, the usual start is a whole character again: one decode
    assert tokenizer.decode(ids[:emitted]) + "".join(pieces) == tokenizer.decode(ids)
    assert "\ufffd" not in "".join(pieces)


@pytest.mark.parametrize("family", ["sentencepiece", "gpt2", "qwen2", "llama3"])
def test_the_direct_decode_equals_batch_decode(family):
    from app.engine.core.detok import batch_decoder
    from tests.fixtures.tokenizer_families import HARD_TEXT, build_family

    tokenizer = build_family(family).tokenizer
    sequences = []
    for text in HARD_TEXT:
        ids = tokenizer(text).input_ids
        sequences += [ids[i: j] for i in range(0, len(ids), 3) for j in range(i, len(ids) + 1, 2)]
    sequences.append([tokenizer.eos_token_id, 5, 6])  # special tokens are kept
    assert batch_decoder(tokenizer)(sequences) == tokenizer.batch_decode(
        sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False)
