"""Prompt suites: the built-in ones shipped with edgespec, or a user's JSONL file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from edgespec.errors import ConfigError
from edgespec.text.grammar import Grammar, GrammarError

# `structured` (extraction and tool calls, each with its JSON schema) was written for the
# grammar's drafts after they were built and is their held-out set: nothing was tuned on it.
BUILTIN = (
    "code_generation",
    "code_editing",
    "summarization",
    "chat",
    "multi_turn_editing",
    "structured",
)
EDIT_REPLY = "Return the whole file, code only."


@dataclass(frozen=True)
class BenchPrompt:
    suite: str
    index: int
    prompt: str
    system: str | None = None
    max_tokens: int | None = None
    # Multi-turn editing sessions: the same file edited turn after turn, each turn's file the
    # previous turn's answer (`prompt` is then the instruction; see `edit_prompt`).
    session: int | None = None
    turn: int = 0
    file: str | None = None  # the first turn's file
    language: str = ""
    # Structured output: the JSON schema every answer must match (generated under it).
    schema: dict[str, Any] | None = None

    @property
    def grammar(self) -> Grammar | None:
        return None if self.schema is None else Grammar.json_schema(self.schema)

    def edit_prompt(self, file: str) -> str:
        return f"{self.prompt} {EDIT_REPLY}\n\n```{self.language}\n{file}```"


def _session(name: str, doc: dict[str, object], where: str, first: int) -> list[BenchPrompt]:
    """One multi-turn editing session: {"file": ..., "turns": [...], "language": ...}."""
    file, turns, language = doc.get("file"), doc.get("turns"), doc.get("language", "")
    if not isinstance(file, str) or not file.strip():
        raise ConfigError(f"{where}: 'file' must be a non-empty string")
    if not isinstance(language, str):
        raise ConfigError(f"{where}: 'language' must be a string")
    if (
        not isinstance(turns, list)
        or not turns
        or not all(isinstance(t, str) and t.strip() for t in turns)
    ):
        raise ConfigError(f"{where}: 'turns' must be a list of non-empty strings")
    return [
        BenchPrompt(
            name,
            first + i,
            t,
            session=first,
            turn=i,
            file=file if i == 0 else None,
            language=language,
        )
        for i, t in enumerate(turns)
    ]


def _schema(schema: object, where: str) -> dict[str, Any] | None:
    """A prompt's JSON schema, refused here (with its line) if the grammar engine cannot use
    it, rather than after the models have loaded."""
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise ConfigError(f"{where}: 'schema' must be a JSON object")
    try:
        Grammar.json_schema(schema)
    except GrammarError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return schema


def parse_suite(name: str, text: str, source: str) -> list[BenchPrompt]:
    prompts: list[BenchPrompt] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}, line {lineno}"
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        if "turns" in doc:
            unknown = sorted(set(doc) - {"file", "turns", "language"})
            if unknown:
                raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
            prompts += _session(name, doc, where, len(prompts))
            continue
        unknown = sorted(set(doc) - {"prompt", "system", "max_tokens", "schema"})
        if unknown:
            raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
        prompt = doc.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(f"{where}: 'prompt' must be a non-empty string")
        system = doc.get("system")
        if system is not None and not isinstance(system, str):
            raise ConfigError(f"{where}: 'system' must be a string")
        max_tokens = doc.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise ConfigError(f"{where}: 'max_tokens' must be a positive integer")
        schema = _schema(doc.get("schema"), where)
        prompts.append(BenchPrompt(name, len(prompts), prompt, system, max_tokens, schema=schema))
    if not prompts:
        raise ConfigError(f"{source}: the suite has no prompts")
    return prompts


def load_suite(name_or_path: str) -> list[BenchPrompt]:
    if name_or_path in BUILTIN:
        text = (
            resources.files("edgespec")
            .joinpath(f"bench/prompts/{name_or_path}.jsonl")
            .read_text("utf-8")
        )
        return parse_suite(name_or_path, text, f"suite {name_or_path}")
    path = Path(name_or_path)
    if not path.is_file():
        raise ConfigError(
            f"unknown suite {name_or_path!r}: give one of {', '.join(BUILTIN)} or a JSONL file"
        )
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read suite {path}: {exc}") from exc
    return parse_suite(path.stem, text, str(path))
