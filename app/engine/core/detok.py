"""Incremental detokenisation: the text each token adds, right for byte-level BPE
and SentencePiece.

A token's text is what decoding it adds to the text before it. Decoding a
short window of preceding tokens gives SentencePiece its leading space right.
A token that ends inside a multi-byte character adds "" and stays *pending*;
the token that completes the character carries all the pending text. So the
texts of committed tokens always concatenate to the decoded text.

The window never starts inside a character: SentencePiece's byte fallback
decodes a run of byte tokens that is not valid UTF-8 as one replacement
character per byte, so a window cut through an emoji's bytes would turn every
later byte of that run into replacement characters and hold the text back for
good. The window moves back (a character is at most 4 bytes) until its decoded
text no longer starts with one.

Cost: a pass decodes once. The window and every prefix the pass needs (its
committed tokens and its rejected drafts) are decoded in one call; only when
the window's usual start turns out to cut a character are the earlier starts
tried, and the batch decoded again. A tokenizer of the `tokenizers` library is
called directly, skipping the per-call work of transformers' `batch_decode`,
when nothing overrides the way `batch_decode` reaches it (the result is the same).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REPLACEMENT = "\ufffd"
WINDOW = 6  # tokens of already-emitted context decoded with the new ones
MAX_CHAR_BYTES = 4  # the longest UTF-8 character: how far back a window may move to start on a character

Decode = Callable[[list[list[int]]], list[str]]


def batch_decoder(tokenizer: PreTrainedTokenizerBase) -> Decode:
    """`tokenizer.batch_decode` with special tokens kept and no clean-up, as one call for many sequences.

    For transformers' `TokenizersBackend`, when neither `batch_decode`, `decode` nor `_decode` is overridden,
    that call ends in the backend's own `decode` of each sequence: call it directly.
    """
    backend = _plain_backend(tokenizer)
    if backend is not None:
        return lambda sequences: [backend.decode(ids, skip_special_tokens=False) for ids in sequences]
    return lambda sequences: tokenizer.batch_decode(sequences, skip_special_tokens=False,
                                                    clean_up_tokenization_spaces=False)


def _plain_backend(tokenizer: PreTrainedTokenizerBase):
    """The `tokenizers.Tokenizer` that batch_decode ends in, if nothing on the way is overridden; else None."""
    try:
        from tokenizers import Tokenizer
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    kind = type(tokenizer)
    plain = (isinstance(tokenizer, TokenizersBackend)
             and kind._decode is TokenizersBackend._decode  # noqa: SLF001 - the step batch_decode ends in
             and kind.decode is PreTrainedTokenizerBase.decode
             and kind.batch_decode is PreTrainedTokenizerBase.batch_decode)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if plain and isinstance(backend, Tokenizer) else None


class StreamDetokenizer:
    """Texts of the committed stream; `peek` answers for tokens that may still be rejected."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids)
        self.emitted = len(self.ids)  # tokens before this index have had their text emitted
        self._window: tuple[int, int] = (-1, 0)  # (emitted, start of the context window) last chosen
        self._decode_all: Decode = batch_decoder(tokenizer)

    def _decode_after_window(self, continuations: list[list[int]]) -> tuple[list[str], int]:
        """Decoded window, then window + each continuation (pending tokens included by the caller), in one call;
        and the window's start. The window starts WINDOW tokens back, moved back off a split character."""
        known = self._window[0] == self.emitted
        start = self._window[1] if known else max(0, self.emitted - WINDOW)
        decoded = self._decode_all(self._batch(start, continuations))
        if not known:
            if decoded[0].startswith(REPLACEMENT):  # rare: the window cuts a character
                moved = self._earlier_start(start)
                if moved != start:
                    start, decoded = moved, self._decode_all(self._batch(moved, continuations))
            self._window = (self.emitted, start)
        return decoded, start

    def _batch(self, start: int, continuations: list[list[int]]) -> list[list[int]]:
        window = self.ids[start: self.emitted]
        return [window] + [window + ids for ids in continuations]

    def _earlier_start(self, start: int) -> int:
        """The first of start - 1, start - 2, ... (at most MAX_CHAR_BYTES - 1 back) whose window decodes without a
        leading replacement character; `start` if none does."""
        candidates = list(range(start - 1, max(-1, start - MAX_CHAR_BYTES), -1))
        texts = self._decode_all([self.ids[i: self.emitted] for i in candidates]) if candidates else []
        return next((i for i, text in zip(candidates, texts, strict=True) if not text.startswith(REPLACEMENT)), start)

    def _texts(self, new_ids: Sequence[int], kept: int = 0,
               rejected: Sequence[int] = ()) -> tuple[list[str], int, list[str]]:
        """Texts of `new_ids` after the stream and how many of them complete their text; and the texts of
        `rejected`, tokens that would have followed new_ids[:kept] instead of the rest of new_ids."""
        pending = self.ids[self.emitted:]
        new_ids, rejected = list(new_ids), list(rejected)
        continuations = [pending + new_ids[: i + 1] for i in range(len(new_ids))]
        continuations += [pending + new_ids[:kept] + rejected[: j + 1] for j in range(len(rejected))]
        decoded, _ = self._decode_after_window(continuations)
        texts, done_after, completed = _added(len(decoded[0]), decoded[1: len(new_ids) + 1])
        if not rejected:
            return texts, completed, []
        done = done_after[kept - 1] if kept else len(decoded[0])
        return texts, completed, _added(done, decoded[len(new_ids) + 1:])[0]

    def peek(self, new_ids: Sequence[int]) -> list[str]:
        return self._texts(new_ids)[0] if new_ids else []

    def peek_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> list[str]:
        """Texts of tree nodes (parents before children, -1 = after the stream): what each adds after its path.

        One decode per node, all in one batch: a node's text is its path's text minus its nearest ancestor's
        that ends on a whole character ("" while it ends inside one, as in the stream).
        """
        pending = self.ids[self.emitted:]
        paths: list[list[int]] = []
        for token, parent in zip(tokens, parents, strict=True):
            paths.append((paths[parent] if parent >= 0 else pending) + [token])
        decoded, _ = self._decode_after_window(paths)
        whole = [len(decoded[0])] * len(paths)  # per node: length of the text its children continue
        texts = []
        for i, (text, parent) in enumerate(zip(decoded[1:], parents, strict=True)):
            before = whole[parent] if parent >= 0 else len(decoded[0])
            if text.endswith(REPLACEMENT):
                texts.append("")
                whole[i] = before
            else:
                texts.append(text[before:])
                whole[i] = len(text)
        return texts

    def commit(self, new_ids: Sequence[int]) -> list[str]:
        """Append `new_ids` to the stream; their texts."""
        return self.commit_block(new_ids, len(new_ids))[0]

    def commit_block(self, new_ids: Sequence[int], kept: int,
                     rejected: Sequence[int] = ()) -> tuple[list[str], list[str]]:
        """Append `new_ids` to the stream; their texts, and those of `rejected` (peeked: never committed), the
        tokens that would have followed new_ids[:kept], all in one decode."""
        if not new_ids and not rejected:
            return [], []
        texts, completed, peeked = self._texts(new_ids, kept, rejected)
        if completed:
            self.emitted = len(self.ids) + completed
        self.ids.extend(new_ids)
        return texts, peeked


def _added(done: int, decoded: list[str]) -> tuple[list[str], list[int], int]:
    """What each of a chain of decoded prefixes adds to the last one that ended on a whole character (`done`
    characters at first): the texts, the length reached after each, and how many complete their text."""
    texts, lengths, completed = [], [], 0
    for i, text in enumerate(decoded):
        if text.endswith(REPLACEMENT):
            texts.append("")
        else:
            texts.append(text[done:])
            done, completed = len(text), i + 1
        lengths.append(done)
    return texts, lengths, completed
