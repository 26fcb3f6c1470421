"""Every request's gate (where it may come from, the key it shows), its access-log line and
count, and OpenAI's error body for any error. A web page elsewhere must not drive a server on
this machine, neither through its own origin nor by a DNS name rebound to 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from edgespec.api import GenerationStats
from edgespec.server.identity import key_refused
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ApiError
from edgespec.system import settings

# The access log: method, path, status and, for an answer, its generation's stats.
Log = Callable[[str, str, int, GenerationStats | None], None]

# Their answers of 200 are logged where they end, with their stats (completions.py).
_GENERATING = frozenset({"/v1/chat/completions", "/v1/completions", "/infill"})
_ENDPOINTS = frozenset({"/health", "/metrics", "/v1/models"}) | _GENERATING
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def guard(
    app: FastAPI,
    keys: Sequence[str],
    metrics: Metrics,
    say: Log,
    host: str,
    cors: Sequence[str],
) -> None:
    """Installs the middleware and the error handlers on `app`; `keys`: those a request must
    show one of (none: any request may call); `host`: the address served, which decides the
    Host names accepted; `cors`: the web origins whose pages may call."""
    callers = Callers(host, cors)

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
            # Answered by `unexpected`, outside this middleware: counted and logged here.
            metrics.requests.labels(_endpoint(request), "500").inc()
            say(request.method, request.url.path, 500, None)
            raise
        metrics.requests.labels(_endpoint(request), str(response.status_code)).inc()
        if request.url.path not in _GENERATING or response.status_code != 200:
            say(request.method, request.url.path, response.status_code, None)
        return response

    if cors:
        # Added last, so it runs first: it answers the browsers' preflight requests.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
        )
    _error_bodies(app, metrics)


def _error_bodies(app: FastAPI, metrics: Metrics) -> None:
    """OpenAI's error body for every error."""

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


class Callers:
    """Which requests may come from where: this machine's names (or any, on a wildcard
    address), and web pages only from the origins --cors allows."""

    def __init__(self, host: str, cors: Sequence[str]) -> None:
        name = _bare(host)
        # A wildcard address serves every name this machine has: no Host to hold it to.
        self.any_host = name in ("", "0.0.0.0", "::")
        self.hosts = _LOOPBACK_NAMES | {name}
        self.origins = frozenset(o.rstrip("/").lower() for o in cors)

    def refusal(self, request: Request) -> str | None:
        """Why the request may not come from where it does (None: it may)."""
        host = request.headers.get("host", "")
        if not self.any_host and _bare(host) not in self.hosts:
            return f"the Host {host!r} is not served here; use http://127.0.0.1 or --host"
        # This server serves no pages: an Origin is another site's page, allowed by --cors.
        origin = request.headers.get("origin")
        if origin is None or origin.rstrip("/").lower() in self.origins or "*" in self.origins:
            return None
        return f"web pages from {origin!r} may not call this server; see --cors"


def _bare(host: str) -> str:
    """The name in a Host header or --host value, without port or brackets."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1:].partition("]")[0]
    if name.count(":") == 1:
        name = name.partition(":")[0]
    return name.rstrip(".")
