"""Grammars for structured output (JSON schemas, GBNF, Lark), compiled by llguidance against
the target's tokenizer into the engine's `Constraint`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import llguidance
import numpy as np

from edgespec.errors import ConfigError
from edgespec.text.bounded_input import read_file
from edgespec.text.gbnf import to_lark

# JSON on one line with the separators most models write: free whitespace lets a model loop on
# newlines until max_tokens, and fixed separators are text the grammar drafts for free.
JSON_OPTIONS: dict[str, Any] = {
    "item_separator": ", ",
    "key_separator": ": ",
    "whitespace_flexible": False,
}
MAX_GRAMMAR_CHARS = 1_000_000  # a grammar's text, refused before it is parsed (hostile input)
# Bounds on a compile's memory and time; llguidance allows 250,000 and 500,000 (measured:
# docs/tuning.md, Grammar limits).
MAX_LEXER_STATES = 50_000  # 1-2 kB each
MAX_GRAMMAR_SYMBOLS = 50_000

# llguidance recurses along a grammar's rules, and a long chain overflows an 8 MB stack, killing
# the process: its work runs on threads with this much (only the pages used become memory;
# measured: docs/tuning.md, Grammar stack).
GRAMMAR_STACK = 256 << 20
_stack_size = threading.Lock()
_T = TypeVar("_T")


class GrammarError(ConfigError):
    """A grammar or schema that cannot be used: unsupported, malformed or too large."""


@dataclass(frozen=True)
class Grammar:
    """What the output must match: llguidance's grammar and, for messages, its `label`."""

    source: str
    label: str

    @classmethod
    def json_schema(
        cls, schema: dict[str, Any] | str, label: str = "the JSON schema", check: bool = True
    ) -> Grammar:
        """A JSON Schema, as a dict or its text. `check=False`: not compiled yet (the server
        compiles it once, after its queue check)."""
        try:
            text = schema if isinstance(schema, str) else json.dumps(schema)
        except RecursionError:
            raise GrammarError(f"{label} is nested too deeply", field="schema") from None
        _check_size(text, label)
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise GrammarError(f"{label} is not valid JSON: {exc}", field="schema") from exc
        if not isinstance(parsed, dict | bool):
            raise GrammarError(f"{label} must be an object", field="schema")
        try:
            source = llguidance.LLMatcher.grammar_from_json_schema(
                text,
                overrides=JSON_OPTIONS,  # type: ignore[arg-type]
            )
        except ValueError as exc:
            raise GrammarError(f"{label} cannot be used: {exc}", field="schema") from exc
        return cls(source, label).checked() if check else cls(source, label)

    @classmethod
    def json_object(cls) -> Grammar:
        return cls.json_schema({"type": "object"}, "any JSON object")

    @classmethod
    def gbnf(cls, text: str, label: str = "the grammar") -> Grammar:
        """A grammar in llama.cpp's GBNF (or llguidance's Lark), start rule `root`."""
        _check_size(text, label)
        try:
            lark = to_lark(text)
        except Exception as exc:  # the converter raises its own and Python's errors alike
            raise GrammarError(f"{label} cannot be read: {exc}", field="grammar") from exc
        return cls(llguidance.LLMatcher.grammar_from_lark(lark), label).checked()

    @classmethod
    def from_schema_option(cls, value: str, option: str = "--json-schema") -> Grammar:
        """`--json-schema` or the chat's `/schema` (`option`, for messages): the schema's JSON,
        or its file's path (`~` expands)."""
        if value.lstrip().startswith("{"):
            return cls.json_schema(value)
        path = Path(value).expanduser()
        return cls.json_schema(_read(path, f"{option} {value}"), f"the JSON schema in {value}")

    @classmethod
    def from_gbnf_file(cls, path: Path) -> Grammar:
        return cls.gbnf(_read(path.expanduser(), f"--grammar {path}"), f"the grammar in {path}")

    def checked(self) -> Grammar:
        """This grammar, once llguidance finds nothing wrong with it."""
        _on_deep_stack(self._validate)
        return self

    def _validate(self) -> None:
        failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            self.source, None, limits=_limits()
        )
        if failed:
            raise GrammarError(f"{self.label} cannot be used: {_first_line(messages[0])}")

    def compile(self, tokenizer: llguidance.LLTokenizer) -> GrammarConstraint:
        """A fresh constraint for one generation; refuses a grammar llguidance cannot use."""
        return _on_deep_stack(lambda: self._compile(tokenizer))

    def _compile(self, tokenizer: llguidance.LLTokenizer) -> GrammarConstraint:
        # No separate validation: that compiles twice, and the matcher keeps the same errors.
        matcher = llguidance.LLMatcher(tokenizer, self.source, log_level=0, limits=_limits())
        # Some grammars fail only once followed (matching no text, past a limit after the
        # forced `{`): the first mask and the forced text tell, before the answer starts.
        if not matcher.is_error():
            matcher.compute_bitmask()
        if not matcher.is_error():
            _follow_forced(matcher, tokenizer)
        if matcher.is_error():
            raise GrammarError(f"{self.label} cannot be used: {_first_line(matcher.get_error())}")
        return GrammarConstraint(matcher)


class GrammarConstraint:
    """One generation's llguidance matcher, as the engine's Constraint. What is allowed is
    always the mask: where text is forced, it admits only the tokenizer's own spelling of it
    (not `{` then `"a` for `{"a`), which a token-by-token check would let through."""

    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        self._matcher = matcher
        # Packed masks here and along `_ahead`, the draft last checked, kept for its verification.
        self._masks: list[np.ndarray] = []
        self._ahead: list[int] = []

    def _bits(self) -> np.ndarray:
        if not self._masks:
            self._masks.append(self._compute())
        return self._masks[0]

    def _compute(self) -> np.ndarray:
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        self._check()
        return bits

    def allows(self, token: int) -> bool:
        return _allowed(self._bits(), token)

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        same = next(
            (i for i, (a, b) in enumerate(zip(self._ahead, tokens, strict=False)) if a != b),
            min(len(self._ahead), len(tokens)),
        )
        masks: list[np.ndarray] = []
        walked, ended = 0, False
        for i, token in enumerate(tokens):
            masks.append(self._masks[i] if i <= same and i < len(self._masks) else self._compute())
            if not _allowed(masks[-1], token):
                break
            # Only the end is left, and llguidance does not record taking it: rolling it back
            # would undo the token before it, so it is counted, not consumed.
            ended = self._matcher.is_stopped()
            if ended:
                break
            self._matcher.consume_token(token)
            self._check()
            walked += 1
        self._matcher.rollback(walked)
        self._masks, self._ahead = masks, list(tokens[:walked])
        return walked + 1 if ended else walked

    def mask(self, n_vocab: int) -> np.ndarray:
        allowed = np.unpackbits(self._bits(), bitorder="little").view(bool)  # 0/1: no copy
        if len(allowed) >= n_vocab:
            return allowed[:n_vocab]
        return np.pad(allowed, (0, n_vocab - len(allowed)))

    def advance(self, token: int) -> None:
        if self._ahead and self._ahead[0] == token and len(self._masks) > 1:
            self._ahead, self._masks = self._ahead[1:], self._masks[1:]
        else:
            self._ahead, self._masks = [], []
        self._matcher.consume_token(token)
        self._check()

    def take_certain(self, limit: int) -> list[int]:
        taken: list[int] = []
        while len(taken) < limit:
            only = _only(self._bits())
            if only is None:
                break
            self.advance(only)
            taken.append(only)
            if self._matcher.is_stopped():  # it took the end of generation
                break
        return taken

    def incomplete(self) -> str | None:
        if self._matcher.is_accepting():
            return None
        return "the text ended before the grammar was complete"

    def _check(self) -> None:
        # llguidance never raises for a grammar's errors: the matcher keeps them.
        if self._matcher.is_error():
            raise GrammarError(f"grammar: {_first_line(self._matcher.get_error())}")


def _limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(
        max_lexer_states=MAX_LEXER_STATES, max_grammar_size=MAX_GRAMMAR_SYMBOLS
    )


def _follow_forced(matcher: llguidance.LLMatcher, tokenizer: llguidance.LLTokenizer) -> None:
    """Follow the forced text, compute the mask after it, and go back (unless in error)."""
    forced = matcher.compute_ff_bytes()
    if not forced:
        return
    taken = matcher.try_consume_tokens(tokenizer.tokenize_bytes(forced))
    if taken and not matcher.is_error():
        matcher.compute_bitmask()
    if not matcher.is_error():
        matcher.rollback(taken)


def start_deep(run: Callable[[], None]) -> bool:
    """Start `run()` on a daemon thread of GRAMMAR_STACK; False (nothing started) if none."""
    thread = threading.Thread(target=run, name="edgespec-grammar", daemon=True)
    with _stack_size:  # the size is the process's, for the threads started next
        try:
            before = threading.stack_size(GRAMMAR_STACK)
        except (ValueError, RuntimeError):  # a platform that cannot change it
            return False
        try:
            thread.start()
        except RuntimeError:  # no thread of that size to be had (a 32-bit address space)
            return False
        finally:
            threading.stack_size(before)
    return True


def _on_deep_stack(work: Callable[[], _T]) -> _T:
    """`work()` on a deep-stack thread where the platform gives one; it raises here."""
    outcome: Future[_T] = Future()

    def run() -> None:
        try:
            outcome.set_result(work())
        except BaseException as exc:  # raised in the caller
            outcome.set_exception(exc)

    if not start_deep(run):
        return work()
    return outcome.result()


def _allowed(bits: np.ndarray, token: int) -> bool:
    return token >> 3 < len(bits) and bool(bits[token >> 3] >> (token & 7) & 1)


def _only(bits: np.ndarray) -> int | None:
    """The token a mask allows when it allows exactly one."""
    nonzero = np.flatnonzero(bits)
    if len(nonzero) != 1:
        return None
    byte = int(bits[nonzero[0]])
    return None if byte & (byte - 1) else int(nonzero[0]) * 8 + byte.bit_length() - 1


def _read(path: Path, what: str) -> str:
    """A grammar's or a schema's file, read no further than the cap."""
    try:
        return read_file(path, MAX_GRAMMAR_CHARS, what)
    except ConfigError as exc:
        raise GrammarError(str(exc), field=what.partition(" ")[0]) from exc


def unfinished(why: str | None, finish_reason: str, max_tokens: int) -> str | None:
    """One line for an answer that stopped inside its grammar (None where it did not)."""
    if why is None:
        return None
    if finish_reason == "length":
        return f"the output is incomplete: --max-tokens ({max_tokens}) ran out inside it"
    if finish_reason == "context":
        return "the output is incomplete: the context filled up inside it (raise --ctx-size)"
    return f"the output is incomplete: {why}"


def _check_size(text: str, what: str) -> None:
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"{what} has {len(text):,} characters; at most {MAX_GRAMMAR_CHARS:,}")


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "unknown error"
