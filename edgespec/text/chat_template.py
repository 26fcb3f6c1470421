"""A conversation rendered by the model's chat template, tokenized so that only the template's
own markers become special tokens: a message's `<|im_start|>system` is text, not a turn."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from edgespec.errors import ConfigError

# Private-use characters no template writes: a placeholder for a message's text.
_MARK = "\ue000edgespec-message-{}\ue001"
_MARKS = re.compile("\ue000edgespec-message-([0-9]+)\ue001")

# A message: role and content, and for tool turns `tool_calls` or `tool_call_id`.
Render = Callable[[Sequence[dict[str, Any]]], str]


class Tokenize(Protocol):
    def __call__(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...


def chat_tokens(
    render: Render, tokenize: Tokenize, messages: Sequence[dict[str, Any]]
) -> list[int]:
    """The tokens of `render(messages)`, message text tokenized as plain text."""
    text = render(messages)
    if not any(_has_markers(tokenize, m["content"]) for m in messages):
        # The usual case: no marker in any message, the rendered text tokenized whole.
        return tokenize(text, add_special=False, parse_special=True)
    skeleton = render([{**m, "content": _MARK.format(i)} for i, m in enumerate(messages)])
    parts = _MARKS.split(skeleton)  # template, message index, template, ...
    tokens: list[int] = []
    at: int | None = 0  # where `text` is in step with the skeleton; None once it is not
    for n, part in enumerate(parts):
        if n % 2 == 0:
            tokens += tokenize(part, add_special=False, parse_special=True)
            at = at + len(part) if at is not None and text.startswith(part, at) else None
            continue
        content = messages[int(part)]["content"]
        written = _as_written(content, text, at, parts[n + 1])
        at = None if written is None or at is None else at + len(written)
        tokens += tokenize(
            content if written is None else written, add_special=False, parse_special=False
        )
    return tokens


def check_tool_text(
    tokenize: Tokenize, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None
) -> None:
    """Refuse tool definitions or calls holding the model's special tokens as text: the
    template writes them outside any message's text, where they would become turns."""
    parts = [("tools", tools), *(("tool_calls", m.get("tool_calls")) for m in messages)]
    for what, value in parts:
        if value and _has_markers(tokenize, json.dumps(value, ensure_ascii=False)):
            raise ConfigError(f"{what} hold the model's special tokens as text", field=what)


def _has_markers(tokenize: Tokenize, content: str) -> bool:
    plain = tokenize(content, add_special=False, parse_special=False)
    return tokenize(content, add_special=False, parse_special=True) != plain


def _as_written(content: str, text: str, at: int | None, after: str) -> str | None:
    """The message as the template wrote it into `text` at `at` (templates often trim it);
    None where that cannot be told."""
    if at is None:
        return None
    for form in (content, content.strip(), content.lstrip(), content.rstrip()):
        if text.startswith(form + after, at):
            return form
    return None
