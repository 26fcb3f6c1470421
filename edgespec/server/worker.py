"""Requests served in slots of one loaded pair, each slot's generation in a thread of its own;
with several slots, each is a lane whose target passes are decoded with the others'."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Hashable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from edgespec.api import DoneEvent, Event, GenerationStats, Speculator, TokenEvent

_END = object()
TURNS_KEPT = 1024  # clients whose last turn is remembered, for the order of service (a guess)


class QueueFull(Exception):
    """More requests wait than the queue holds."""


class Worker:
    def __init__(
        self,
        spec: Speculator,
        queue: int,
        finished: Callable[[GenerationStats], None],
        slots: int = 1,
    ) -> None:
        self.spec = spec
        self.finished = finished  # called with every generation's stats, completed or not
        self.queue = queue
        # One slot: the pair itself, one generation at a time. Several: a lane each.
        lanes = spec.lanes(slots) if slots > 1 else [spec]
        self.batch = lanes[0].batch  # the lanes' shared passes (None: one slot)
        self.slots = len(lanes)
        self._free: list[Speculator] = lanes
        # Who waits, in order of arrival; a slot goes to the client served least recently.
        self._waiters: deque[tuple[Hashable, asyncio.Future[Speculator]]] = deque()
        self._turns: OrderedDict[Hashable, int] = OrderedDict()  # by client: its last turn
        self._turn = 0
        self._running: dict[int, asyncio.Future[None]] = {}  # by lane: its generation's thread
        self._threads = ThreadPoolExecutor(self.slots, thread_name_prefix="edgespec-slot")

    def close(self) -> None:
        """Wait for the generations winding down in the slots' threads, before the models go."""
        self._threads.shutdown(wait=True)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def busy(self) -> int:
        """Slots running a generation (or handing their slot on)."""
        return self.slots - len(self._free)

    def full(self, client: Hashable = None) -> bool:
        """Whether `client`'s request would be refused: no free slot, the queue full, and no
        other client holding more than its share of it."""
        return not self._free and self.waiting >= self.queue and self._displaced(client) is None

    def _displaced(self, client: Hashable) -> tuple[Hashable, asyncio.Future[Speculator]] | None:
        """The waiting request that gives its place to `client`'s in a full queue: the newest
        of the client holding the most places, where that is two or more than `client` holds
        (else None: swapping would not make the shares more even)."""
        held = Counter(c for c, _ in self._waiters)
        if not held:
            return None
        most, count = held.most_common(1)[0]
        if most == client or count <= held[client] + 1:
            return None
        return next(w for w in reversed(self._waiters) if w[0] == most)

    @asynccontextmanager
    async def turn(self, client: Hashable = None) -> AsyncIterator[Speculator]:
        """Wait for a free slot (the one that last served `client` where it is free); the slot's
        pair to generate with. QueueFull when too many already wait, or when this client's
        waiting request gave its place to another client's (a fair share each)."""
        if self.full(client):
            raise QueueFull
        lane = self._take(client)
        if lane is None:
            dropped = self._displaced(client) if self.waiting >= self.queue else None
            if dropped is not None:
                self._waiters.remove(dropped)
                dropped[1].set_exception(QueueFull())
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append((client, waiter))
            try:
                lane = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._give(waiter.result())  # handed over just as it left
                elif (client, waiter) in self._waiters:
                    self._waiters.remove((client, waiter))
                raise
        self._turn += 1
        self._turns.pop(client, None)
        self._turns[client] = self._turn
        if len(self._turns) > TURNS_KEPT:  # the longest unserved count as never served
            self._turns.popitem(last=False)
        try:
            yield lane
        finally:
            # Nothing awaited here (a cancelled request may not await): a generation still
            # winding down in its thread hands the slot on when it has finished.
            running = self._running.pop(id(lane), None)
            if running is not None and not running.done():
                running.add_done_callback(lambda _: self._give(lane))
            else:
                self._give(lane)

    def _take(self, client: Hashable) -> Speculator | None:
        if not self._free:
            return None
        own = [lane for lane in self._free if lane.cache_client == client]
        lane = own[0] if own else self._free[0]
        self._free.remove(lane)
        return lane

    def _give(self, lane: Speculator) -> None:
        """The slot to the waiting client served least recently (its first request to come),
        else back to the free ones."""
        self._waiters = deque(w for w in self._waiters if not w[1].done())
        if not self._waiters:
            self._free.append(lane)
            return
        entry = min(self._waiters, key=lambda w: self._turns.get(w[0], 0))
        self._waiters.remove(entry)
        entry[1].set_result(lane)

    async def settled(self, lane: Speculator) -> None:
        """Wait until `lane`'s last generation has ended: its stats final."""
        running = self._running.get(id(lane))
        if running is not None:
            await asyncio.shield(running)

    async def events(
        self, start: Callable[[], Generator[Event, None, None]], lane: Speculator
    ) -> AsyncGenerator[Event, None]:
        """The events of `start()`'s generation on `lane`, run in its thread. Leaving early
        closes it there within a round, so that the caches hold only committed tokens (a
        lane's cells go)."""
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[object] = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            # A round's events cross to the event loop together: each crossing wakes the loop
            # (measured: docs/tuning.md, Events across the worker's thread).
            held: list[Event] = []
            try:
                events = start()  # what it touches that a pass uses, it does under the lock
                left = False  # the client left before the generation ended
                try:
                    for event in events:
                        held.append(event)
                        if isinstance(event, TokenEvent):
                            continue
                        loop.call_soon_threadsafe(out.put_nowait, held)
                        held = []
                        if stop.is_set():
                            left = not isinstance(event, DoneEvent)
                            break
                finally:
                    events.close()
                    if left and self.batch is not None:
                        self._empty(lane)
                    if lane.session.last_stats is not None:
                        self.finished(lane.session.last_stats)
            except BaseException as exc:  # handed to the request, which answers with it
                loop.call_soon_threadsafe(out.put_nowait, [*held, exc])
                held = []
            finally:
                loop.call_soon_threadsafe(out.put_nowait, [*held, _END])

        self._running[id(lane)] = loop.run_in_executor(self._threads, produce)
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

    def _empty(self, lane: Speculator) -> None:
        """A slot whose client left keeps nothing of it: its cells in both caches go."""
        assert self.batch is not None
        with self.batch.lock:
            lane.empty_caches()
