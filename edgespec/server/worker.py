"""One loaded pair serves one request at a time: the generation runs in a thread (the event
loop stays free to accept, queue and refuse), events come back through an asyncio queue, and a
client that goes away stops its generation within one round."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager

from edgespec.api import Event, GenerationStats, Speculator, TokenEvent

_END = object()


class QueueFull(Exception):
    """More requests wait than the queue holds."""


class Worker:
    def __init__(
        self, spec: Speculator, queue: int, finished: Callable[[GenerationStats], None]
    ) -> None:
        self.spec = spec
        self.finished = finished  # called with every generation's stats, completed or not
        self.queue = queue
        self.waiting = 0
        self._lock = asyncio.Lock()  # FIFO: waiters are served in the order they came
        self._running: asyncio.Future[None] | None = None

    def full(self) -> bool:
        """A new request would have to wait, and the queue has no room for it."""
        return self._lock.locked() and self.waiting >= self.queue

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for this request's turn; QueueFull when too many already wait."""
        if self.full():
            raise QueueFull
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            # Nothing awaited here (a cancelled request may not await): a generation still
            # winding down in its thread hands the turn on when it has finished.
            running, self._running = self._running, None
            if running is not None and not running.done():
                running.add_done_callback(lambda _: self._lock.release())
            else:
                self._lock.release()

    async def settled(self) -> None:
        """Wait until the generation started last has ended in its thread (one left early
        winds down within a round), so that its stats are final."""
        if self._running is not None:
            await asyncio.shield(self._running)

    async def events(
        self, start: Callable[[], Generator[Event, None, None]]
    ) -> AsyncGenerator[Event, None]:
        """The events of `start()`'s generation, run in a thread. Leaving early (a client that
        disconnected) closes the generation there, so both KV caches hold only committed
        tokens before the next request starts."""
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[object] = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            # A round's events cross to the event loop together: its tokens are out at once,
            # and each crossing wakes the loop (per token, that cost more than the engine's
            # own work on a fast device).
            held: list[Event] = []
            try:
                events = start()
                try:
                    for event in events:
                        held.append(event)
                        if isinstance(event, TokenEvent):
                            continue
                        loop.call_soon_threadsafe(out.put_nowait, held)
                        held = []
                        if stop.is_set():
                            break
                finally:
                    events.close()
                    if self.spec.session.last_stats is not None:
                        self.finished(self.spec.session.last_stats)
            except BaseException as exc:  # handed to the request, which answers with it
                loop.call_soon_threadsafe(out.put_nowait, [*held, exc])
                held = []
            finally:
                loop.call_soon_threadsafe(out.put_nowait, [*held, _END])

        self._running = loop.run_in_executor(None, produce)
        try:
            while True:
                for item in await out.get():  # type: ignore[attr-defined]
                    if item is _END:
                        return
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            stop.set()
