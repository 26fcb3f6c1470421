"""A chat request's `response_format` and `tools` as one grammar for the answer: JSON that
matches a schema, or tool calls in the format Qwen2.5's and Hermes-style chat templates write
(`<tool_call>` JSON `</tool_call>`) with arguments that match their tools' schemas."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edgespec.server.openai import ApiError, ChatRequest
from edgespec.text.grammar import JSON_OPTIONS, Grammar, GrammarError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}  # OpenAI's default


class Function(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # every tool's arguments are held to its schema anyway


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str = "function"
    function: Function


@dataclass(frozen=True)
class Structure:
    """What a chat request asks of its answer (`grammar` None: free text)."""

    grammar: Grammar | None = None
    tools: list[dict[str, Any]] | None = None
    param: str = "response_format"  # the field an error of the grammar's is about
    names: tuple[str, ...] = ()  # the tools the answer may call (none: it makes no calls)
    # "auto": the stop strings that end the answer's text, never a call's arguments.
    stops: tuple[str, ...] = ()
    # Each tool's arguments alone, with their field, so that an error names the tool.
    parts: tuple[tuple[str, Grammar], ...] = ()


def structure(req: ChatRequest, target: Any) -> Structure:
    """The request's structure for this target, or an ApiError naming what it cannot serve."""
    if req.tools and OPEN not in (getattr(target, "chat_template", None) or ""):
        raise _unsupported("tools", "tools with a model whose chat template has no tool calls")
    tools = _tools(req.tools or [])
    choice = req.tool_choice if req.tool_choice is not None else "auto"
    fmt = req.response_format or {}
    if fmt.get("type", "text") != "text" and tools and choice != "none":
        raise _unsupported("response_format", "response_format together with tools")
    if not tools and choice not in ("none", "auto"):
        raise ApiError(400, "tool_choice needs tools", param="tool_choice")
    named = _chosen(choice, tools) if tools else None
    if named is None:
        # No call may be made ("none"), so the tools are not described either: described, they
        # lead small models (the default pair's) to write calls as text instead of answering.
        asked = _response_format(fmt)
        if asked is None:
            return Structure()
        _tokenizer(target, "response_format")
        schema = fmt.get("type") == "json_schema"
        param = "response_format.json_schema.schema" if schema else "response_format"
        return Structure(asked, param=param)
    auto = choice == "auto"
    stops = tuple(s for s in req.stops if s) if auto else ()
    lark = _calls_lark(named, auto, req.parallel_tool_calls, _tokenizer(target, "tools"))
    dumped = [t.model_dump(exclude_none=True) for t in tools]
    names = tuple(t.function.name for t in named)
    grammar = _grammar(lark, named)
    parts = tuple(
        (f"tools.{i}.function.parameters", Grammar.json_schema(_parameters(t), check=False))
        for i, t in enumerate(tools)
    )
    return Structure(grammar, dumped, "tools", names, stops, parts)


def _calls_lark(named: list[Tool], auto: bool, parallel: bool, tokenizer: Any) -> str:
    open_, close = _marker(OPEN, tokenizer), _marker(CLOSE, tokenizer)
    options = " | ".join(f"f{i}" for i in range(len(named)))
    more = f' ("\\n" {open_} body)*' if parallel else ""
    rules = [f'body: "\\n" ({options}) "\\n" {close}']
    if auto:
        start, free = _free_text(open_)
        rules += free
    else:
        start = f"{open_} body"
    for i, tool in enumerate(named):
        # The arguments are a grammar of their own, so that their schema's `$ref`s point in it.
        head = json.dumps(f'{{"name": "{tool.function.name}", "arguments": ')
        rules.append(f'f{i}: {head} @args{i} "}}"')
    return "\n".join([f"start: {start}{more}", *rules]) + "\n"


def _free_text(open_: str) -> tuple[str, list[str]]:
    """With tool_choice "auto": text, or tool calls after it. Text never spells the marker, so
    that a model echoing `<tool_call>` from its prompt cannot make up a call."""
    rules = [
        f"MARK: {json.dumps(OPEN)}",
        "ANY: /(?s:.*)/",
        "TEXT: /(?s:.+)/ & ~(ANY MARK ANY)",
    ]
    alternatives = ["TEXT"]
    if open_.startswith("<["):
        return " | ".join([*alternatives, f"TEXT? {open_} body"]), rules
    # The marker is text too: the text before a call ends with the first marker (lazy), as
    # greedy text could not give way to a marker it may not hold.
    rules += ["LEAD: ANY MARK", "lead[lazy]: LEAD"]
    return " | ".join([*alternatives, "lead body"]), rules


def _tools(items: list[Any]) -> list[Tool]:
    tools = []
    for i, item in enumerate(items):
        try:
            tool = Tool.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in (f"tools.{i}", *first["loc"]))
            raise ApiError(400, f"{where}: {first['msg']}", param=where) from exc
        if tool.type != "function":
            raise _unsupported(f"tools.{i}.type", f"tools of type {tool.type!r}")
        try:  # each schema read alone first, so that the error names the tool at fault
            Grammar.json_schema(_parameters(tool), check=False)
        except GrammarError as exc:
            raise ApiError(400, str(exc), param=f"tools.{i}.function.parameters") from exc
        tools.append(tool)
    names = [t.function.name for t in tools]
    if len(set(names)) < len(names):
        raise ApiError(400, "tools: two tools have the same name", param="tools")
    return tools


def _parameters(tool: Tool) -> dict[str, Any]:
    return tool.function.parameters or NO_PARAMETERS


def _chosen(choice: str | dict[str, Any], tools: list[Tool]) -> list[Tool] | None:
    """The tools the answer may call (None: none, text only)."""
    if choice == "none":
        return None
    if choice in ("auto", "required"):
        return tools
    # Any shape may arrive here (`"function": "f"`, `"function": null`): read with care.
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(choice, dict)
        or choice.get("type") != "function"
        or not isinstance(name, str)
    ):
        raise ApiError(
            400,
            "tool_choice is 'none', 'auto', 'required' or "
            '{"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    named = [t for t in tools if t.function.name == name]
    if not named:
        raise ApiError(
            400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
        )
    return named


def _marker(text: str, tokenizer: Any) -> str:
    """A tool-call marker in the grammar: its special token where the vocabulary has one (no
    text could spell it), else its text."""
    tokens = tokenizer.tokenize_str(text)
    if len(tokens) == 1 and tokenizer.is_special_token(tokens[0]):
        return f"<[{tokens[0]}]>"
    return json.dumps(text)


def _grammar(lark: str, tools: list[Tool]) -> Grammar:
    """The Lark grammar with each tool's arguments as the grammar `args{i}`."""
    grammars: list[dict[str, Any]] = [{"lark_grammar": lark}]
    for i, tool in enumerate(tools):
        schema = {**_parameters(tool), "x-guidance": JSON_OPTIONS}
        grammars.append({"name": f"args{i}", "json_schema": schema})
    return Grammar(json.dumps({"grammars": grammars}), "the tools' schemas")


def _tokenizer(target: Any, param: str) -> Any:
    """The target's vocabulary for the grammar engine; a target on RPC servers has none."""
    tokenizer = getattr(target, "grammar_tokenizer", None)
    if tokenizer is None:
        raise _unsupported(param, f"{param} with this target")
    return tokenizer


def _response_format(fmt: dict[str, Any]) -> Grammar | None:
    kind = fmt.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar.json_object()
    if kind != "json_schema":
        raise _unsupported("response_format", f"response_format {kind!r}")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise ApiError(
            400, "response_format.json_schema must be an object", param="response_format"
        )
    schema = spec.get("schema", {"type": "object"})
    try:
        return Grammar.json_schema(schema, check=False)
    except GrammarError as exc:
        raise ApiError(400, str(exc), param="response_format.json_schema.schema") from exc


def _unsupported(param: str, what: str) -> ApiError:
    return ApiError(
        400, f"{what} is not supported by this server", param=param, code="unsupported_parameter"
    )
