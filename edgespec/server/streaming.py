"""Answers to clients that may leave or stop reading: the SSE response and the disconnect watch."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from edgespec.server.openai import ApiError

# A stream's generation never waits for its reader; what the reader has not taken waits here.
STREAM_BUFFER_BYTES = 1 << 20  # the most a stream holds ahead of its reader (a guess)
READER_LAG_S = 10.0  # a reader this far behind its answer is cut, or gone if it took nothing
DRAIN_S = 30.0  # to take the rest once the answer has ended or been cut (a guess)
T = TypeVar("T")


class ReaderTooSlow(Exception):
    """The reader fell too far behind its answer: the answer is cut where it is."""


def cut_error() -> ApiError:
    """What a cut stream's last event says."""
    return ApiError(
        408,
        f"the stream was cut: its reader fell more than {READER_LAG_S:g} s behind the answer "
        "(everything before this event was sent)",
        code="reader_too_slow",
    )


class Outbox:
    """A stream's events made ahead of its reader. `put` never waits: one that finds the reader
    more than READER_LAG_S behind, or STREAM_BUFFER_BYTES ahead, raises ReaderTooSlow (once:
    what follows, the cut's own last events, is taken as it comes). None ends the stream."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[float, bytes | None]] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self.cut = False
        self.ended_at: float | None = None  # when the answer ended (or was cut)
        self.sending: float | None = None  # when the chunk being sent was made

    def behind(self, now: float) -> float:
        """How long the oldest event the reader has not taken has waited."""
        oldest = self.sending
        if oldest is None and self._chunks:
            oldest = self._chunks[0][0]
        return 0.0 if oldest is None else now - oldest

    async def put(self, chunk: str | None) -> None:
        now = time.monotonic()
        data = None if chunk is None else chunk.encode()
        if data is not None and not self.cut:
            over = self._bytes + len(data) > STREAM_BUFFER_BYTES
            if over or self.behind(now) > READER_LAG_S:
                self.cut = True
                self.ended_at = now
                raise ReaderTooSlow
        if data is None and self.ended_at is None:
            self.ended_at = now
        self._bytes += len(data or b"")
        self._chunks.append((now, data))
        self._ready.set()

    async def get(self) -> tuple[float, bytes | None]:
        """The next event to send (bytes; None: the end) and when it was made."""
        while not self._chunks:
            self._ready.clear()
            await self._ready.wait()
        made, data = self._chunks.popleft()
        self._bytes -= len(data or b"")
        return made, data


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
    """Server-sent events made by `produce` in a task of its own, which holds the slot and never
    waits for the reader (see Outbox): a client that leaves, takes nothing for READER_LAG_S
    while its answer is made, or has not taken it all DRAIN_S after it ended, is disconnected
    and its generation stopped. `ended` is told once whether the client took the whole answer."""

    def __init__(
        self,
        produce: Callable[[Outbox], Awaitable[None]],
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
        outbox = Outbox()

        async def feed() -> None:
            try:
                await self.produce(outbox)
            except Exception:
                await outbox.put(None)  # the answer ends here (cut short); the error is logged
                raise

        producer = asyncio.ensure_future(feed())
        left = asyncio.ensure_future(gone(receive))
        try:
            start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            await send(start)
            while True:
                made, chunk = await unless_gone(left, outbox.get())
                if chunk is None:
                    break
                body = {"type": "http.response.body", "body": chunk, "more_body": True}
                outbox.sending = made
                await asyncio.wait_for(send(body), _send_limit(outbox))
                outbox.sending = None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (Gone, OSError, asyncio.TimeoutError):  # the client left or stopped reading
            self.ended(False)
        else:
            self.ended(not outbox.cut)
        finally:
            left.cancel()
            producer.cancel()


def _send_limit(outbox: Outbox) -> float:
    """How long the next send may take: READER_LAG_S while the answer is made, else what is
    left of DRAIN_S since it ended."""
    if outbox.ended_at is None:
        return READER_LAG_S
    return max(0.0, outbox.ended_at + DRAIN_S - time.monotonic())
