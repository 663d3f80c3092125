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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REPLACEMENT = "\ufffd"
WINDOW = 6  # tokens of already-emitted context decoded with the new ones
MAX_CHAR_BYTES = 4  # the longest UTF-8 character: how far back a window may move to start on a character


class StreamDetokenizer:
    """Texts of the committed stream; `peek` answers for tokens that may still be rejected."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids)
        self.emitted = len(self.ids)  # tokens before this index have had their text emitted
        self._window: tuple[int, int] = (-1, 0)  # (emitted, start of the context window) last chosen

    def _decode_all(self, sequences: list[list[int]]) -> list[str]:
        return self.tokenizer.batch_decode(sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _window_start(self) -> int:
        """Where the context window starts: WINDOW tokens back, moved back off a split character."""
        if self._window[0] != self.emitted:
            start = max(0, self.emitted - WINDOW)
            candidates = list(range(start, max(-1, start - MAX_CHAR_BYTES), -1))  # start, start - 1, ...
            texts = self._decode_all([self.ids[i: self.emitted] for i in candidates])
            start = next((i for i, text in zip(candidates, texts, strict=True) if not text.startswith(REPLACEMENT)),
                         start)
            self._window = (self.emitted, start)
        return self._window[1]

    def _texts(self, new_ids: Sequence[int]) -> tuple[list[str], int]:
        """Texts of `new_ids` after the stream, and how many of them complete their text."""
        prefix = self.ids[self._window_start(): self.emitted]
        pending = self.ids[self.emitted:]
        new_ids = list(new_ids)
        decoded = self._decode_all([prefix] + [prefix + pending + new_ids[: i + 1] for i in range(len(new_ids))])
        done = len(decoded[0])
        texts, completed = [], 0
        for i, text in enumerate(decoded[1:]):
            if text.endswith(REPLACEMENT):
                texts.append("")
                continue
            texts.append(text[done:])
            done, completed = len(text), i + 1
        return texts, completed

    def peek(self, new_ids: Sequence[int]) -> list[str]:
        return self._texts(new_ids)[0] if new_ids else []

    def peek_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> list[str]:
        """Texts of tree nodes (parents before children, -1 = after the stream): what each adds after its path.

        One decode per node, all in one batch: a node's text is its path's text minus its nearest ancestor's
        that ends on a whole character ("" while it ends inside one, as in the stream).
        """
        prefix = self.ids[self._window_start(): self.emitted]
        pending = self.ids[self.emitted:]
        paths: list[list[int]] = []
        for token, parent in zip(tokens, parents, strict=True):
            paths.append((paths[parent] if parent >= 0 else prefix + pending) + [token])
        decoded = self._decode_all([prefix] + paths)
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
        if not new_ids:
            return []
        texts, completed = self._texts(new_ids)
        if completed:
            self.emitted = len(self.ids) + completed
        self.ids.extend(new_ids)
        return texts
