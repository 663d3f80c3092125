"""Tiny random models and a tiny byte-level BPE tokenizer, built from configs in code.

Nothing is downloaded: tests that need a model folder call `tiny_pair` and get
a target and a smaller drafter that share one tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

EOS = "<|endoftext|>"
TRAINING_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Speculative decoding drafts tokens and verifies them in one pass.",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "Ünïcödé тест 漢字 emoji 🙂 and مرحبا",
]


def make_tokenizer(folder: Path, vocab_size: int = 384, extra_text: str = "") -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAINING_TEXT + ([extra_text] if extra_text else []), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=EOS)
    fast.save_pretrained(folder)
    return fast


def model_config(arch: str, vocab_size: int, eos_id: int, layers: int, hidden: int, context: int = 512):
    common = dict(vocab_size=vocab_size, eos_token_id=eos_id, bos_token_id=eos_id, pad_token_id=eos_id)
    if arch == "llama":
        return LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context, **common)
    if arch == "qwen2":
        return Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context, **common)
    if arch == "mistral":  # full attention (no sliding window), as recent Mistral checkpoints configure it
        return MistralConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
                             sliding_window=None, **common)
    if arch == "gpt2":
        return GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=context, **common)
    raise ValueError(arch)


def make_model(folder: Path, arch: str, tokenizer, layers: int, hidden: int, seed: int, context: int = 512,
               vocab_size: int | None = None, mute_eos: bool = False):
    """A random model; `vocab_size` above len(tokenizer) pads the vocabulary like many real families do."""
    torch.manual_seed(seed)
    config = model_config(arch, vocab_size or len(tokenizer), tokenizer.eos_token_id, layers, hidden, context)
    model = AutoModelForCausalLM.from_config(config)
    _sharpen(model)
    if mute_eos:
        _mute(model, tokenizer.eos_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _sharpen(model) -> None:
    """Scale the LM head so random models have peaked, varied next-token distributions."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)


def _mute(model, token_id: int) -> None:
    """A zero head row: logit 0, below the peaked maximum of the others, so greedy runs never end early."""
    with torch.no_grad():
        model.get_output_embeddings().weight[token_id].zero_()


def tiny_pair(root: Path, arch: str = "llama", seed: int = 0, context: int = 512,
              mute_eos: bool = False) -> tuple[Path, Path]:
    """A (target, drafter) pair of folders sharing one tokenizer.

    `context` sets the longest sequence (long runs need more than the default 512); `mute_eos` makes greedy
    generations run to max new tokens.
    """
    root = Path(root)
    tokenizer = make_tokenizer(root / "tokenizer")
    options = dict(context=context, mute_eos=mute_eos)
    target = make_model(root / f"{arch}-target", arch, tokenizer, layers=4, hidden=64, seed=seed, **options)
    draft = make_model(root / f"{arch}-draft", arch, tokenizer, layers=1, hidden=32, seed=seed + 1, **options)
    return target, draft
