"""What a request asks that this server does not do: refused as OpenAI does, never ignored."""

from __future__ import annotations

from edgespec.server.openai import ApiError, ChatRequest, CompletionRequest, Request

# OpenAI's limits: alternatives per token in chat, and text completions' legacy count.
MAX_TOP_LOGPROBS = 20
MAX_LOGPROBS = 5


def refused(req: Request) -> ApiError | None:
    """Why the request is refused (None: it is not)."""
    if req.n != 1:
        return _unsupported("n", "n > 1 is not supported; only n = 1 is")
    if req.functions:
        return _unsupported("functions", "functions are not supported by this server; use tools")
    if isinstance(req, CompletionRequest):
        if req.echo:
            return _unsupported("echo", "echo is not supported by this server")
        if req.best_of not in (None, 1):
            return _unsupported("best_of", "best_of > 1 is not supported; only best_of = 1 is")
    if not isinstance(req, ChatRequest):
        if req.tools:
            return _unsupported("tools", "tools are not supported in text completions")
        kind = (req.response_format or {}).get("type", "text")
        if kind != "text":
            return _unsupported(
                "response_format", "response_format is not supported in text completions"
            )
    if (bad := _bad_logprobs(req)) is not None:
        return bad
    if req.tools and req.top_logprobs_asked is not None:
        # A tool call's text is not the message's content: which tokens to report is unclear.
        return _unsupported("logprobs", "logprobs are not supported together with tools")
    if req.logit_bias:
        return _unsupported("logit_bias", "logit_bias is not supported by this server")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            return _unsupported(name, f"{name} is not supported by this server; send 0")
    return None


def _bad_logprobs(req: Request) -> ApiError | None:
    """Why the request's logprobs fields are refused (None: they are not)."""
    if isinstance(req, ChatRequest):
        if req.logprobs is not None and not isinstance(req.logprobs, bool):
            return _invalid("logprobs", "logprobs is true or false; top_logprobs says how many")
        if req.top_logprobs is not None and req.logprobs is not True:
            return _invalid("top_logprobs", "top_logprobs needs logprobs: true")
        return _out_of_range("top_logprobs", req.top_logprobs, MAX_TOP_LOGPROBS)
    if req.top_logprobs is not None:
        return _invalid(
            "top_logprobs", "text completions take logprobs as a number; top_logprobs is chat's"
        )
    if req.logprobs is True:
        return _invalid("logprobs", f"logprobs is a number from 0 to {MAX_LOGPROBS} here")
    return _out_of_range("logprobs", req.top_logprobs_asked, MAX_LOGPROBS)


def _out_of_range(param: str, value: int | None, most: int) -> ApiError | None:
    if value is None or 0 <= value <= most:
        return None
    code = "integer_above_max_value" if value > most else "integer_below_min_value"
    return ApiError(400, f"{param} is from 0 to {most}, got {value}", param=param, code=code)


def _invalid(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _unsupported(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="unsupported_parameter")
