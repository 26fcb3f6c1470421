"""The ASGI app and its routes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from edgespec.api import Speculator
from edgespec.server import infill, infill_answers
from edgespec.server.completions import Serving
from edgespec.server.guard import Log, guard
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ChatRequest, CompletionRequest
from edgespec.server.responses import now
from edgespec.server.worker import Worker


def create_app(
    spec: Speculator,
    *,
    model_names: Sequence[str],
    api_key: str | None = None,
    api_keys: Sequence[str] = (),
    queue: int = 16,
    log: Log | None = None,
    host: str = "127.0.0.1",
    cors: Sequence[str] = (),
    shared_memory: bool = False,
    slots: int = 1,
    metrics: bool = False,
) -> FastAPI:
    """`api_key`: a key every caller shows (one shared key: `user` is no boundary between its
    holders, so answers leave out the counters that tell what the caches hold); `api_keys`:
    keys each of which is its own client; `host`: the address served, which decides the Host
    names accepted; `cors`: the web origins whose pages may call the API (none: only clients
    that are not web pages); `shared_memory`: every client drafts from every client's earlier
    texts (else each API key and `user` from its own); `slots`: how many requests run at once,
    their target passes shared (the models loaded with as many sequences); `metrics`: serve
    `GET /metrics`, whose counters are every client's together."""
    app = FastAPI(title="edgespec", docs_url=None, redoc_url=None, openapi_url=None)
    counters = Metrics()
    worker = Worker(spec, queue, counters.generation, slots)
    counters.queue.set_function(lambda: worker.waiting)
    say: Log = log or (lambda *args: None)
    keys = [*api_keys, *([api_key] if api_key is not None else [])]
    guard(app, keys, counters, say, host, cors)
    _info_routes(app, model_names, counters if metrics else None)
    # The cache counters go only to callers that are all one client (no key), or each their
    # own (a key each, not pooled): else they would tell one caller what another's prompt was.
    reports_cache = api_key is None and not (api_keys and shared_memory)
    serving = Serving(spec, worker, counters, model_names, say, shared_memory, reports_cache)
    _completion_routes(app, serving)
    app.state.worker, app.state.metrics, app.state.compiler = worker, counters, serving.compiler
    return app


def _info_routes(app: FastAPI, model_names: Sequence[str], metrics: Metrics | None) -> None:
    created = now()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    if metrics is not None:
        counters = metrics

        @app.get("/metrics")
        async def prometheus() -> Response:
            return PlainTextResponse(counters.text(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {"id": n, "object": "model", "created": created, "owned_by": "edgespec"}
            for n in model_names
        ]
        return {"object": "list", "data": data}


def _completion_routes(app: FastAPI, serving: Serving) -> None:
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serving.complete(request, ChatRequest)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serving.complete(request, CompletionRequest)

    @app.post("/infill")
    async def fill_in_the_middle(request: Request) -> Response:
        return await serving.complete(
            request, infill.InfillRequest, infill_answers.answer, infill_answers.stream
        )
