"""What a request asks that this server does not do: refused as OpenAI does, never ignored."""

from __future__ import annotations

from edgespec.server.openai import ApiError, ChatRequest, CompletionRequest, Request

# OpenAI's limits: alternatives per token in chat, and text completions' legacy count.
MAX_TOP_LOGPROBS = 20
MAX_LOGPROBS = 5


def refuse(req: Request) -> None:
    """The ApiError that refuses the request, if anything does."""
    if req.n != 1:
        raise _unsupported("n", "n > 1 is not supported; only n = 1 is")
    if req.functions:
        raise _unsupported("functions", "functions are not supported by this server; use tools")
    if isinstance(req, CompletionRequest):
        if req.echo:
            raise _unsupported("echo", "echo is not supported by this server")
        if req.best_of not in (None, 1):
            raise _unsupported("best_of", "best_of > 1 is not supported; only best_of = 1 is")
    if not isinstance(req, ChatRequest):
        if req.tools:
            raise _unsupported("tools", "tools are not supported in text completions")
        kind = (req.response_format or {}).get("type", "text")
        if kind != "text":
            raise _unsupported(
                "response_format", "response_format is not supported in text completions"
            )
    _check_logprobs(req)
    if req.tools and req.top_logprobs_asked is not None:
        # A tool call's text is not the message's content: which tokens to report is unclear.
        raise _unsupported("logprobs", "logprobs are not supported together with tools")
    if req.logit_bias:
        raise _unsupported("logit_bias", "logit_bias is not supported by this server")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise _unsupported(name, f"{name} is not supported by this server; send 0")


def _check_logprobs(req: Request) -> None:
    if isinstance(req, ChatRequest):
        if req.logprobs is not None and not isinstance(req.logprobs, bool):
            raise _invalid("logprobs", "logprobs is true or false; top_logprobs says how many")
        if req.top_logprobs is not None and req.logprobs is not True:
            raise _invalid("top_logprobs", "top_logprobs needs logprobs: true")
        _check_range("top_logprobs", req.top_logprobs, MAX_TOP_LOGPROBS)
        return
    if req.top_logprobs is not None:
        raise _invalid(
            "top_logprobs", "text completions take logprobs as a number; top_logprobs is chat's"
        )
    if req.logprobs is True:
        raise _invalid("logprobs", f"logprobs is a number from 0 to {MAX_LOGPROBS} here")
    _check_range("logprobs", req.top_logprobs_asked, MAX_LOGPROBS)


def _check_range(param: str, value: int | None, most: int) -> None:
    if value is not None and not 0 <= value <= most:
        code = "integer_above_max_value" if value > most else "integer_below_min_value"
        raise ApiError(400, f"{param} is from 0 to {most}, got {value}", param=param, code=code)


def _invalid(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _unsupported(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="unsupported_parameter")
