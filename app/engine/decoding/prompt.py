"""A prompt as token ids, checked before a generation starts: every refusal is a `SettingsError` or a
`ContextTooLongError` (app/engine/loading/context.py, shared with the command line) whose message says
what to change."""

from __future__ import annotations

from app.engine.loading.context import check_prompt_fits, encode_prompt_ids
from app.engine.settings import DecodeSettings, SettingsError


def encode_prompt(tokenizer, prompt: str, context_length: int, chat_template: bool = False) -> list[int]:
    """The prompt's token ids (with the chat template's turn around it when asked); refuses an empty prompt,
    text that is not valid Unicode and a prompt longer than the context."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise SettingsError("the prompt is empty: type some text to continue")
    _require_encodable(prompt)
    ids = encode_prompt_ids(tokenizer, prompt, chat_template)
    check_prompt_fits(len(ids), context_length)
    return ids


def check_tree_budget(settings: DecodeSettings, prompt_tokens: int, context_length: int) -> None:
    """Refuse a tree whose node budget cannot fit in what the context has left after the prompt."""
    room = context_length - prompt_tokens
    if settings.tree is not None and settings.tree > room:
        raise SettingsError(f"the tree's node budget ({settings.tree}) is more than the context has left after "
                            f"the prompt ({room} tokens): lower the budget or shorten the prompt")


def _require_encodable(prompt: str) -> None:
    """Refuse text the tokenizer cannot take: lone surrogates (e.g. undecodable bytes in a command line)."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SettingsError(
            f"the prompt holds characters that are not valid Unicode at position {exc.start} "
            f"({prompt[exc.start:exc.end]!r}), e.g. bytes in another encoding than UTF-8: "
            "remove them or save the text as UTF-8.") from None
