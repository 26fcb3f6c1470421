"""The OpenAI API's request and response shapes, and its error body."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edgespec.api import GenerationStats

# What a finished generation reports, in OpenAI's words ("context": the context filled up).
FINISH = {"stop": "stop", "length": "length", "context": "length", None: "stop"}


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


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


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
    max_tokens: int | None = Field(default=None)
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
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatRequest(Request):
    messages: list[Message] = Field(min_length=1)


class CompletionRequest(Request):
    prompt: str


def completion_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def usage(stats: GenerationStats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated,
        "total_tokens": stats.prompt_tokens + stats.generated,
    }


def edgespec_block(stats: GenerationStats) -> dict[str, Any]:
    """How the answer was made: drafters used, what they drafted and what was accepted."""
    return {
        "drafters": {
            name: {"rounds": c.rounds, "drafted": c.drafted, "accepted": c.accepted}
            for name, c in stats.by_drafter.items()
        },
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "acceptance": round(stats.acceptance_rate, 4),
        "tokens_per_target_pass": round(stats.mean_accepted_length, 4),
        "tokens_per_s": round(stats.tokens_per_s, 3),
        "ttft_s": round(stats.ttft_s, 4),
    }


def now() -> int:
    return int(time.time())
