"""Every request's gate, its access-log line and count, and OpenAI's error body for any error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from edgespec.api import GenerationStats
from edgespec.server.identity import key_refused
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ApiError
from edgespec.server.origins import Callers
from edgespec.system import settings

# The access log: method, path, status and, for an answer, its generation's stats.
Log = Callable[[str, str, int, GenerationStats | None], None]

# Their answers of 200 are logged where they end, with their stats (completions.py).
_GENERATING = frozenset({"/v1/chat/completions", "/v1/completions", "/infill"})
_ENDPOINTS = frozenset({"/health", "/metrics", "/v1/models"}) | _GENERATING


def guard(app: FastAPI, keys: Sequence[str], metrics: Metrics, say: Log, callers: Callers) -> None:
    """Installs the middleware and the error handlers on `app`; `keys`: those a request must
    show one of (none: any request may call)."""

    @app.middleware("http")
    async def gate(request: Request, call_next: Callable[[Request], Any]) -> Response:
        refused = callers.refusal(request)
        if refused is not None:
            error = ApiError(403, refused, kind="permission_error", code="forbidden")
            return _answer_error(request, error, metrics, say)
        if key_refused(request, keys):
            error = ApiError(401, "missing or wrong API key", code="invalid_api_key")
            return _answer_error(request, error, metrics, say)
        try:
            response: Response = await call_next(request)
        except Exception:
            # Answered by `unexpected` below, outside this middleware: counted and logged here.
            metrics.requests.labels(_endpoint(request), "500").inc()
            say(request.method, request.url.path, 500, None)
            raise
        metrics.requests.labels(_endpoint(request), str(response.status_code)).inc()
        if request.url.path not in _GENERATING or response.status_code != 200:
            say(request.method, request.url.path, response.status_code, None)
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        metrics.errors.labels(exc.kind).inc()
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        error = ApiError(exc.status_code, str(exc.detail), code=code)
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        if settings.debug():
            raise exc
        metrics.errors.labels("server_error").inc()
        error = ApiError(500, f"internal error: {type(exc).__name__}", kind="server_error")
        return JSONResponse(error.body(), status_code=500)


def _endpoint(request: Request) -> str:
    """The metrics label of a request: its route, never the path a caller made up (each new
    label is a series kept for good)."""
    path = request.url.path
    return path if path in _ENDPOINTS else "other"


def _answer_error(request: Request, error: ApiError, metrics: Metrics, say: Log) -> Response:
    metrics.errors.labels(error.kind).inc()
    metrics.requests.labels(_endpoint(request), str(error.status)).inc()
    say(request.method, request.url.path, error.status, None)
    return JSONResponse(error.body(), status_code=error.status)
