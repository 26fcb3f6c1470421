"""A generation run in the slot it was handed: its events as they come, or its whole text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from edgespec.api import DoneEvent, Speculator, TokenEvent
from edgespec.errors import EdgespecError
from edgespec.server.generation import Generation
from edgespec.server.openai import ApiError
from edgespec.server.worker import Worker
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


async def collect(worker: Worker, lane: Speculator, gen: Generation) -> tuple[str, DoneEvent]:
    """The whole text and how it ended; a grammar or engine error as its ApiError."""
    parts: list[str] = []
    done: DoneEvent | None = None
    try:
        async for event in answer(worker, lane, gen):
            if isinstance(event, TokenEvent):
                parts.append(event.text)
                if gen.logprobs is not None:
                    gen.logprobs.feed(event)
            elif isinstance(event, DoneEvent):
                done = event
    except GrammarError as exc:  # a grammar that failed once followed (past its limits)
        raise ApiError(400, str(exc), param=gen.structure.param) from exc
    except EdgespecError as exc:
        raise ApiError(500, str(exc), kind="server_error") from exc
    assert done is not None
    return "".join(parts), done


async def whole(worker: Worker, gen: Generation) -> tuple[str, DoneEvent]:
    """A whole answer, once its generation has ended in its thread (what it learned kept)."""
    async with worker.turn(gen.client) as lane:
        result = await collect(worker, lane, gen)
        await worker.settled(lane)
        return result
