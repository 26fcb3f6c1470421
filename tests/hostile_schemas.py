"""Hostile JSON schemas, each taken as the server takes a request's `response_format` and a
tool's parameters (server/structured.py) against a real model's vocabulary, then followed for
a few tokens. Run as `python -m tests.hostile_schemas MODEL.gguf` in a child process whose time
and memory the test caps; one JSON line per schema: served or refused, and how long it took."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _arrays(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "boolean"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": 1}
    return schema


NODE = {"type": "object", "properties": {"value": {"type": "integer"}, "next": {"$ref": "#"}}}
SCHEMAS: dict[str, dict[str, Any]] = {
    "nested objects, 100 deep": _nested(100),
    "nested arrays, 1000 deep": _arrays(1000),
    "an enum of 100,000 values": {"enum": [f"v{i}" for i in range(100_000)]},
    "a recursive $ref (a linked list)": NODE,
    "a $ref to itself only": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "mutually recursive $refs": {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a",
    },
    "a backtracking pattern": {"type": "string", "pattern": "^(a|aa)*(x+x+)+y$"},
    "a pattern whose automaton explodes": {"type": "string", "pattern": "^(.*a.{20})$"},
    "a pattern of nested counts": {"type": "string", "pattern": "^((a{1,100}){1,100}){1,100}$"},
    "anyOf of 2,000 objects": {
        "anyOf": [{"type": "object", "properties": {f"k{i}": {"const": i}}} for i in range(2000)]
    },
    "a string of 100,000 characters at least": {"type": "string", "minLength": 100_000},
    "an unknown format": {"type": "string", "format": "weird"},
}


def try_one(target: Any, schema: dict[str, Any], as_tool: bool) -> tuple[str, str]:
    """("served", "") once the grammar has been followed for a few tokens, or ("refused",
    the error's message) as the server would answer it."""
    from edgespec.server.openai import ApiError, ChatRequest
    from edgespec.server.structured import structure
    from edgespec.text.grammar import GrammarError

    body: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}
    if as_tool:
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
        body["tool_choice"] = "required"
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
    try:
        grammar = structure(ChatRequest.model_validate(body), target).grammar
        assert grammar is not None
        constraint = grammar.compile(target.grammar_tokenizer)
        for _ in range(16):  # the first allowed token each time: masks all the way
            allowed = np.flatnonzero(constraint.mask(target.n_vocab))
            if len(allowed) == 0 or constraint.incomplete() is None:
                break
            constraint.advance(int(allowed[0]))
    except ApiError as exc:
        return "refused", exc.message
    except GrammarError as exc:  # failed once followed: the server's 400 in the answer's place
        return "refused", str(exc)
    except Exception as exc:  # what the server answers as its own error: a 500
        return "error", f"{type(exc).__name__}: {exc}"
    return "served", ""


def main(model: str) -> None:
    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    target = LlamaModel(model, LoadOptions(n_ctx=256))
    target.chat_template  # noqa: B018 - read once, before the clock starts
    target.grammar_tokenizer  # noqa: B018
    for name, schema in SCHEMAS.items():
        for as_tool in (False, True):
            start = time.monotonic()
            outcome, message = try_one(target, schema, as_tool)
            seconds = round(time.monotonic() - start, 3)
            line = {"schema": name, "tool": as_tool, "outcome": outcome, "message": message}
            print(json.dumps({**line, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
