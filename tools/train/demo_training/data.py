"""Tokenisation, sequence packing and deterministic batch order."""

from __future__ import annotations

import dataclasses
import functools
import random

import torch
from tokenizers import Tokenizer

from .config import END_OF_TEXT
from .corpus import CorpusSplit, Document


@dataclasses.dataclass
class PackedCorpus:
    """Training text as fixed-length token blocks (int64, [n, block_size])."""

    train: torch.Tensor

    def state(self) -> dict:
        return {"train": self.train}


def token_stream(tokenizer: Tokenizer, documents: list[Document]) -> torch.Tensor:
    """Concatenate documents, each preceded by ``<|endoftext|>``."""
    eot_id = tokenizer.token_to_id(END_OF_TEXT)
    encodings = tokenizer.encode_batch([d.text for d in documents], add_special_tokens=False)
    ids: list[int] = []
    for encoding in encodings:
        ids.append(eot_id)
        ids.extend(encoding.ids)
    return torch.tensor(ids, dtype=torch.int64)


def pack_blocks(stream: torch.Tensor, block_size: int) -> torch.Tensor:
    """Cut the stream into non-overlapping blocks; the ragged tail is dropped."""
    count = len(stream) // block_size
    return stream[: count * block_size].view(count, block_size)


def spread_blocks(blocks: torch.Tensor, limit: int) -> torch.Tensor:
    """Evenly spaced subset, so evaluation covers every held-out file."""
    if len(blocks) <= limit:
        return blocks
    indices = torch.linspace(0, len(blocks) - 1, limit).round().long()
    return blocks[indices]


def training_documents(split: CorpusSplit, seed: int, prose_repeats: int) -> list[Document]:
    """Shuffle train documents so code and prose interleave; upweight prose."""
    prose = [d for d in split.train if d.domain == "prose"]
    documents = split.train + prose * (prose_repeats - 1)
    random.Random(seed).shuffle(documents)
    return documents


def pack_corpus(
    tokenizer: Tokenizer, split: CorpusSplit, block_size: int, seed: int, prose_repeats: int,
) -> PackedCorpus:
    documents = training_documents(split, seed, prose_repeats)
    return PackedCorpus(train=pack_blocks(token_stream(tokenizer, documents), block_size))


@functools.lru_cache(maxsize=4)
def epoch_permutation(num_blocks: int, seed: int, epoch: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_blocks, generator=generator)


def batch_at_step(blocks: torch.Tensor, step: int, batch_size: int, seed: int) -> torch.Tensor:
    """The batch for ``step`` depends only on (step, seed): resuming is exact."""
    num_blocks = len(blocks)
    rows = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, num_blocks)
        rows.append(epoch_permutation(num_blocks, seed, epoch)[offset])
    return blocks[torch.stack(rows)]
