"""Prompts, instructions and predicted outputs as the target's tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from edgespec.auto.hints import replacements
from edgespec.errors import ConfigError

Prompt = str | Sequence[dict[str, Any]] | Sequence[int]


def instruction_of(prompt: Prompt) -> str:
    """A text prompt itself, a conversation's last user message; nothing in token ids."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else ""


def prompt_tokens(
    target: Any,
    prompt: Prompt,
    *,
    system: str | None = None,
    raw: bool = False,
    tools: Sequence[dict[str, Any]] | None = None,
) -> list[int]:
    """Text through the chat template (unless `raw`); messages always, with OpenAI's `tools`."""
    if isinstance(prompt, str):
        if raw:
            return list(target.tokenize(prompt, add_special=True, parse_special=False))
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        return list(target.apply_chat_template(messages))
    items = list(prompt)
    if items and isinstance(items[0], dict):
        if tools:
            return list(target.apply_chat_template(items, tools=tools))
        return list(target.apply_chat_template(items))
    return [int(t) for t in cast(list[int], items)]


def text_tokens(target: Any, text: str) -> list[int]:
    """Text as it reads inside an answer: no special tokens added or parsed."""
    return list(target.tokenize(text, add_special=False, parse_special=False))


def replacement_tokens(target: Any, instruction: str) -> list[tuple[list[int], list[int]]]:
    """What an instruction asks to replace, as tokens: as it reads after a space and not."""
    pairs = []
    for old, new in replacements(instruction):
        for before in ("", " "):
            pairs.append((text_tokens(target, before + old), text_tokens(target, before + new)))
    return pairs


def prediction_tokens(target: Any, prediction: str | Sequence[int]) -> list[int]:
    """A predicted output as tokens; a ConfigError when the context cannot hold it."""
    if isinstance(prediction, str):
        tokens = text_tokens(target, prediction)
    else:
        tokens = [int(t) for t in prediction]
    n_ctx = target.n_ctx
    if len(tokens) > n_ctx:
        raise ConfigError(
            f"the prediction has {len(tokens)} tokens but the context holds {n_ctx}",
            field="prediction",
        )
    return tokens
