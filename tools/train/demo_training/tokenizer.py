"""Byte-level BPE tokenizer trained with the ``tokenizers`` library.

Byte-level pre-tokenisation and decoding make every UTF-8 string encodable
and exactly recoverable. ``<|endoftext|>`` is BOS, EOS and PAD at once (GPT-2
style); encoding prepends it, which matches how documents start in the
packed training stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from .config import END_OF_TEXT


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Learn BPE merges over ``texts`` on top of the 256 byte symbols."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    add_bos_processor(tokenizer)
    return tokenizer


def add_bos_processor(tokenizer: Tokenizer) -> None:
    """Prepend ``<|endoftext|>`` when special tokens are requested."""
    eot_id = tokenizer.token_to_id(END_OF_TEXT)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{END_OF_TEXT} $A",
        pair=f"{END_OF_TEXT} $A {END_OF_TEXT} $B",
        special_tokens=[(END_OF_TEXT, eot_id)],
    )


def as_transformers_tokenizer(tokenizer: Tokenizer, context_length: int) -> PreTrainedTokenizerFast:
    """Wrap for ``save_pretrained`` / ``AutoTokenizer.from_pretrained``."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        model_max_length=context_length,
    )


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))
