"""Incremental detokenisation: the text each token adds, right for byte-level BPE
and SentencePiece.

A token's text is what decoding it adds to the text of the tokens before it.
Decoding a short window of preceding tokens gives SentencePiece its leading
space right, and a token that ends inside a multi-byte character adds ""
while the token that completes the character carries the whole character, so
the texts of committed tokens always concatenate to the decoded text.
"""

from __future__ import annotations

from collections.abc import Sequence

REPLACEMENT = "\ufffd"
WINDOW = 6  # preceding tokens decoded for context; covers the longest UTF-8 sequence


def _complete_length(text: str) -> int:
    """Length of `text` without a trailing run of undecodable bytes."""
    return len(text.rstrip(REPLACEMENT))


def token_texts(tokenizer, context_ids: Sequence[int], new_ids: Sequence[int]) -> list[str]:
    """The text each of `new_ids` adds after `context_ids` (one decode call for all)."""
    if not new_ids:
        return []
    tail = list(context_ids[-WINDOW:])
    new_ids = list(new_ids)
    decoded = tokenizer.batch_decode(
        [tail + new_ids[: i + 1] for i in range(-1, len(new_ids))],
        skip_special_tokens=False,
        clean_up_tokenization_spaces=False,
    )
    texts = []
    done = _complete_length(decoded[0])
    for text in decoded[1:]:
        if text.endswith(REPLACEMENT):
            texts.append("")
            continue
        texts.append(text[done:])
        done = len(text)
    return texts
