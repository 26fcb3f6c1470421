"""A generation run in the slot it was handed: its events as they come, or its whole text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from edgespec.api import DoneEvent, Speculator, TokenEvent
from edgespec.errors import EdgespecError
from edgespec.server.generation import Generation
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ApiError, busy
from edgespec.server.streaming import Outbox, ReaderTooSlow, cut_error
from edgespec.server.worker import QueueFull, Worker
from edgespec.text.grammar import GrammarError


async def answer(
    worker: Worker, lane: Speculator, gen: Generation
) -> AsyncIterator[TokenEvent | DoneEvent]:
    """The generation's tokens on `lane`, then how it ended. An "auto" answer ends at its text's
    first stop string, as the engine would end it, never at one in a call's arguments."""
    watch = gen.reader() if gen.structure.stops else None
    events = worker.events(gen.start(lane), lane)
    tokens = 0
    try:
        async for event in events:
            if isinstance(event, DoneEvent):
                yield event
                return
            if isinstance(event, TokenEvent):
                tokens += 1
                yield event
                if watch is not None:
                    watch.feed(event.text)
                    if watch.stopped:
                        break
    finally:
        await events.aclose()  # a generation left early stops within a round
    await worker.settled(lane)
    assert lane.session.last_stats is not None
    # Counted as the engine counts a stop string's tokens: up to the one that completed it.
    yield DoneEvent(finish_reason="stop", stats=replace(lane.session.last_stats, generated=tokens))


async def whole(worker: Worker, gen: Generation) -> tuple[str, DoneEvent]:
    """The whole text and how it ended, once its generation has ended in its thread (what it
    learned kept); a grammar or engine error as its ApiError."""
    parts: list[str] = []
    done: DoneEvent | None = None
    async with worker.turn(gen.client) as lane:
        try:
            async for event in answer(worker, lane, gen):
                if isinstance(event, TokenEvent):
                    parts.append(event.text)
                    if gen.logprobs is not None:
                        gen.logprobs.feed(event)
                elif isinstance(event, DoneEvent):
                    done = event
        except EdgespecError as exc:
            raise _failed(gen, exc) from exc
        await worker.settled(lane)
    assert done is not None
    return "".join(parts), done


async def streamed(
    worker: Worker,
    gen: Generation,
    metrics: Metrics,
    out: Outbox,
    write: Callable[[dict[str, Any]], str],
    send: Callable[[AsyncIterator[TokenEvent | DoneEvent]], Awaitable[None]],
) -> None:
    """`send` run on the generation's events in its slot, writing them into `out`; an error that
    ends the stream (there or in `send`) goes into `out` as its error body, written by `write`."""
    try:
        async with worker.turn(gen.client) as lane:
            await send(answer(worker, lane, gen))
    except QueueFull:
        await out.put(write(busy().body()))
    except ReaderTooSlow:  # the slot is free already: the rest goes out as it may
        await out.put(write(cut_error().body()))
    except EdgespecError as exc:
        error = _failed(gen, exc)
        if error.kind == "server_error":
            metrics.errors.labels("server_error").inc()
        await out.put(write(error.body()))


def _failed(gen: Generation, exc: EdgespecError) -> ApiError:
    if isinstance(exc, GrammarError):  # a grammar that failed once followed (past its limits)
        return ApiError(400, str(exc), param=gen.structure.param)
    return ApiError(500, str(exc), kind="server_error")
