"""Answers to clients that may leave or stop reading: the SSE response and the disconnect watch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

STREAM_BUFFER = 64  # chunks made ahead of a slow client before the generation waits (a guess)
SEND_TIMEOUT_S = 30.0  # a client slower than this to take one chunk has stopped (a guess)
T = TypeVar("T")


class Gone(Exception):
    """The client disconnected before its answer was ready."""


async def gone(receive: Receive) -> None:
    """Returns once the client has disconnected (its body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_gone(left: asyncio.Future[None], work: Awaitable[T]) -> T:
    """`work`'s result, or Gone as soon as `left` (the client disconnected), `work` then
    cancelled: a waiting request leaves the queue, a running one stops within a round."""
    task = asyncio.ensure_future(work)
    either: set[asyncio.Future[Any]] = {task, left}
    try:
        done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    raise Gone


class EventStream(Response):
    """Server-sent events made by `produce` in a task of its own, which holds the slot: a client
    that leaves or stops reading ends it at once (a suspended generator would hold the slot
    until collected). `ended` is told once whether the client took the whole answer."""

    def __init__(
        self,
        produce: Callable[[asyncio.Queue[str | None]], Awaitable[None]],
        headers: dict[str, str],
        ended: Callable[[bool], None],
    ) -> None:
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers(headers)  # without a body: no content-length
        self.produce = produce
        self.ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        buffer: asyncio.Queue[str | None] = asyncio.Queue(STREAM_BUFFER)

        async def feed() -> None:
            try:
                await self.produce(buffer)
            except Exception:
                await buffer.put(None)  # the answer ends here (cut short); the error is logged
                raise

        producer = asyncio.ensure_future(feed())
        left = asyncio.ensure_future(gone(receive))
        try:
            start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            await send(start)
            while (chunk := await unless_gone(left, buffer.get())) is not None:
                body = {"type": "http.response.body", "body": chunk.encode(), "more_body": True}
                await asyncio.wait_for(send(body), SEND_TIMEOUT_S)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (Gone, OSError, asyncio.TimeoutError):  # the client left or stopped reading
            self.ended(False)
        else:
            self.ended(True)
        finally:
            left.cancel()
            producer.cancel()
