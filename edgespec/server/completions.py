"""A completion request's way: read, refused or admitted, compiled, answered whole or streamed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from edgespec.api import GenerationStats, Speculator
from edgespec.server.body import parse
from edgespec.server.compiling import Compiler, compile_structure
from edgespec.server.generation import Generation
from edgespec.server.guard import Log
from edgespec.server.identity import client_of
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ApiError, busy
from edgespec.server.openai import Request as OpenAIRequest
from edgespec.server.refusals import refuse
from edgespec.server.responses import full_response, stream
from edgespec.server.running import whole
from edgespec.server.streaming import EventStream, Gone, gone, unless_gone
from edgespec.server.worker import QueueFull, Worker


class Serving:
    """What the completion routes share."""

    def __init__(
        self,
        spec: Speculator,
        worker: Worker,
        metrics: Metrics,
        names: Sequence[str],
        say: Log,
        shared_memory: bool,
        reports_cache: bool,
    ) -> None:
        self.shared_memory = shared_memory
        self.reports_cache = reports_cache
        self.spec = spec
        self.worker = worker
        self.metrics = metrics
        self.names = names
        self.say = say
        self.compiler = Compiler()

    async def complete(
        self,
        request: Request,
        shape: type[OpenAIRequest],
        full: Callable[..., dict[str, Any]] | None = None,
        streamed: Callable[..., Awaitable[None]] | None = None,
    ) -> Response:
        """`full` and `streamed` make the answer in another shape than OpenAI's (/infill)."""
        req = await parse(request, shape)
        refuse(req)
        if req.model is not None and req.model not in self.names:
            raise ApiError(
                404,
                f"model {req.model!r} is not served here; GET /v1/models lists it",
                param="model",
                code="model_not_found",
            )
        client = client_of(request, req, self.shared_memory)
        if self.worker.full(client):  # refused before any tokenizing
            raise busy()
        # Tokenizing may wait for the running generation (a target on RPC servers answers one
        # call at a time): in a thread, so that the event loop goes on serving meanwhile.
        gen = await asyncio.to_thread(Generation, self.spec, req, client)
        gen.reports_cache = self.reports_cache
        if self.worker.full(client):  # refused before a stream starts, and before any compile
            raise busy()
        gen.constraint = await compile_structure(self.compiler, gen.structure, self.spec.target)
        name = req.model or self.names[0]
        if req.stream:
            return self._as_events(request, gen, name, streamed or stream)
        left = asyncio.ensure_future(gone(request.receive))
        try:
            text, finished = await unless_gone(left, whole(self.worker, gen))
        except QueueFull:
            raise busy() from None
        except Gone:
            # Nobody to answer: the generation stopped or never started; the middleware logs it.
            return Response(status_code=499)
        finally:
            left.cancel()
        self.say("POST", request.url.path, 200, finished.stats)
        return JSONResponse(
            (full or full_response)(gen, name, text, finished), headers={"x-request-id": gen.id}
        )

    def _as_events(
        self, request: Request, gen: Generation, name: str, produce: Callable[..., Awaitable[None]]
    ) -> Response:
        """The answer as server-sent events, logged once the stream has ended."""
        stats: list[GenerationStats] = []
        path = request.url.path

        def logged(took_all: bool) -> None:
            if not took_all:
                self.say("POST", path, 499, None)
            elif stats:  # else it ended with an error, already in the stream
                self.say("POST", path, 200, stats[0])

        return EventStream(
            partial(produce, self.worker, gen, name, self.metrics, stats.append),
            {"x-request-id": gen.id},
            logged,
        )
