"""The context check: does a prompt fit in the target's context window, with room to generate?

One check for every front end: the decoder runs it on every prompt, and the
command line runs it right after reading the tokenizer, before any model's
weights are loaded. Notation: C = the target's context length (positions it
was trained for), n = the prompt's tokens; a run can add at most C - n tokens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from app.engine.errors import ContextTooLongError, SettingsError

UNLIMITED = 1 << 20  # a config that names no context length: treated as this many positions
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length")


def context_length_of(config) -> int:
    """C: the positions a model's config says it holds (UNLIMITED when it names none)."""
    for name in CONTEXT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return UNLIMITED


def check_prompt_fits(prompt_tokens: int, context_length: int) -> None:
    """Raise ContextTooLongError, saying what to do, when n tokens leave no room in a context of C."""
    if prompt_tokens > context_length:
        raise ContextTooLongError(f"the prompt has {prompt_tokens} tokens but the model's context holds "
                                  f"{context_length}; shorten the prompt by {prompt_tokens - context_length} "
                                  "tokens or more")


def encode_prompt_ids(tokenizer, prompt: str, chat_template: bool = False) -> list[int]:
    """The prompt's token ids as the target reads them (wrapped in the chat template when asked)."""
    if not chat_template:
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise SettingsError("this model's tokenizer has no chat template: switch the chat template option off")
    out = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    return list(out["input_ids"] if isinstance(out, Mapping) else out)


def check_prompt_before_loading(target: str, prompt: str, chat_template: bool = False) -> int:
    """Read only the target's tokenizer and config, and refuse a prompt that cannot fit (before the weights
    are loaded); returns n. Problems reading them are left to the load, which reports them properly."""
    from transformers import AutoConfig, AutoTokenizer

    folder = os.path.expanduser(target)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        config = AutoConfig.from_pretrained(folder)
    except Exception:  # noqa: BLE001 - the load names what is wrong with the folder or id
        return 0
    ids = encode_prompt_ids(tokenizer, prompt, chat_template)
    check_prompt_fits(len(ids), context_length_of(config))
    return len(ids)
