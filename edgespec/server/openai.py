"""The OpenAI API's request shapes and its error body."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ApiError(Exception):
    """An error that becomes OpenAI's error body with this HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.param, self.code, self.headers = param, code, headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def busy() -> ApiError:
    """The 429 of a server with no room for the request (its queue or its compiles full)."""
    return ApiError(
        429,
        "too many requests are waiting; retry shortly",
        kind="rate_limit_error",
        headers={"Retry-After": "1"},
    )


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    # "developer" is what newer clients call the system turn; "tool" turns answer tool calls.
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_unless_calls(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required, but in an assistant turn with tool_calls")
        return self

    def for_template(self) -> dict[str, Any]:
        """The turn as chat templates read it: a call's arguments as an object, not JSON text."""
        turn: dict[str, Any] = {"role": self.role, "content": self.content or ""}
        if self.tool_calls:
            turn["tool_calls"] = [c.model_dump() for c in self.tool_calls]
            for call in turn["tool_calls"]:
                call["function"]["arguments"] = _arguments(call["function"]["arguments"])
        if self.tool_call_id is not None:
            turn["tool_call_id"] = self.tool_call_id
        return turn

    @field_validator("role")
    @classmethod
    def _developer_is_system(cls, role: str) -> str:
        return "system" if role == "developer" else role

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_joined(cls, content: Any) -> Any:
        # A message may come as a list of parts: text parts are read, others refused.
        if not isinstance(content, list):
            return content
        kinds = {p.get("type") if isinstance(p, dict) else None for p in content}
        if kinds - {"text"}:
            raise ValueError(f"only text parts are read, not {sorted(map(str, kinds - {'text'}))}")
        return "".join(str(p.get("text", "")) for p in content)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text  # written as the client sent it


class StreamOptions(BaseModel):
    include_usage: bool = False


class EdgespecOptions(BaseModel):
    """The extension block: which drafter and K for this request."""

    model_config = ConfigDict(extra="forbid")
    drafter: str | None = None
    k: int | None = None


# Every stop string is looked for after every token: a few short ones (OpenAI allows 4).
MAX_STOPS = 16
MAX_STOP_CHARS = 200


class Request(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send fields we need not read

    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    user: str | None = None  # with the API key, whose drafting memory this request uses
    edgespec: EdgespecOptions | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    # Off unless asked for (llama.cpp's server does the same): small models allowed several
    # calls tend to repeat the first with other arguments until max_tokens.
    parallel_tool_calls: bool = False
    response_format: dict[str, Any] | None = None
    # Chat: true, with `top_logprobs` alternatives; text completions: how many.
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    # Read only to refuse them (refusals.py).
    functions: list[Any] | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, doc: Any) -> Any:
        # Clients send `"temperature": null` and the like for "the default", as OpenAI accepts.
        if isinstance(doc, dict):
            return {k: v for k, v in doc.items() if v is not None}
        return doc

    @field_validator("stop")
    @classmethod
    def _few_short_stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences, got {len(stops)}")
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"a stop sequence has at most {MAX_STOP_CHARS} characters")
        return stop

    @property
    def top_logprobs_asked(self) -> int | None:
        """How many alternatives each token's logprob comes with (None: no logprobs)."""
        return None if isinstance(self.logprobs, bool) else self.logprobs

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatRequest(Request):
    messages: list[Message] = Field(min_length=1)
    # OpenAI's predicted outputs: the text the answer will mostly repeat, drafted from.
    prediction: str | None = None

    @property
    def top_logprobs_asked(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs is True else None

    @field_validator("prediction", mode="before")
    @classmethod
    def _prediction_text(cls, prediction: Any) -> str:
        """{"type": "content", "content": text or text parts}, as OpenAI takes it: its text."""
        if not isinstance(prediction, dict) or prediction.get("type") != "content":
            raise ValueError('expected {"type": "content", "content": ...}')
        if set(prediction) - {"type", "content"}:
            raise ValueError(f"unknown field {sorted(set(prediction) - {'type', 'content'})[0]!r}")
        content = prediction.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content
        ):
            return "".join(p["text"] for p in content)
        raise ValueError('content must be a string or a list of {"type": "text", "text": ...}')


class CompletionRequest(Request):
    prompt: str
    # OpenAI's legacy fill-in-the-middle: the text after the gap that `prompt` is before.
    suffix: str | None = None
    # Read only to refuse them (refusals.py).
    echo: bool = False
    best_of: int | None = None
