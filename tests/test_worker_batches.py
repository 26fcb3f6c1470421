"""The server's worker hands a round's events to the event loop together: one crossing a round
instead of one an event, the events in order, an error after the tokens before it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from types import SimpleNamespace
from typing import Any

import pytest

from edgespec.api import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.server.worker import Worker


def generation(rounds: int, per_round: int, fail: bool = False) -> Generator[Event, None, None]:
    for r in range(rounds):
        for i in range(per_round):
            yield TokenEvent(token=r * per_round + i, text="x", from_draft=i < per_round - 1)
            if fail and r == rounds - 1:
                raise RuntimeError("the model went away")
        yield RoundEvent(drafter="model", k=per_round, drafted=per_round, accepted=per_round - 1)
    yield DoneEvent(finish_reason="length", stats=GenerationStats(generated=rounds * per_round))


def run(rounds: int, per_round: int, fail: bool = False) -> tuple[list[Any], int]:
    spec: Any = SimpleNamespace(
        session=SimpleNamespace(last_stats=None), cache_client=None, batch=None
    )
    seen: list[Any] = []
    crossings = 0

    async def main() -> None:
        nonlocal crossings
        loop = asyncio.get_running_loop()
        cross = loop.call_soon_threadsafe

        def counted(callback: Any, *args: Any) -> Any:
            nonlocal crossings
            crossings += getattr(callback, "__name__", "") == "put_nowait"  # the worker's
            return cross(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        worker = Worker(spec, queue=1, finished=lambda stats: None)
        async with worker.turn():
            try:
                async for event in worker.events(
                    lambda: generation(rounds, per_round, fail), worker.spec
                ):
                    seen.append(event)
            except RuntimeError as exc:
                seen.append(exc)

    asyncio.run(main())
    return seen, crossings


def test_a_rounds_events_cross_to_the_event_loop_together() -> None:
    seen, crossings = run(rounds=10, per_round=3)
    assert [type(e) for e in seen] == [*([TokenEvent] * 3 + [RoundEvent]) * 10, DoneEvent]
    assert [e.token for e in seen if isinstance(e, TokenEvent)] == list(range(30))
    assert crossings <= 10 + 2  # a round each, the end (on main: one an event, 42)


def test_an_error_mid_round_comes_after_the_tokens_before_it() -> None:
    seen, _ = run(rounds=3, per_round=2, fail=True)
    assert [type(e) for e in seen] == [*([TokenEvent] * 2 + [RoundEvent]) * 2, TokenEvent,
                                       RuntimeError]  # fmt: skip
    with pytest.raises(RuntimeError):
        raise seen[-1]


def test_closing_waits_for_a_generation_still_winding_down_in_its_slot() -> None:
    # The server frees the models after closing the worker: a generation whose client left is
    # still decoding in its slot's thread until its round ends (a segfault when freed under it).
    release, ended = threading.Event(), []

    def generation() -> Generator[Event, None, None]:
        try:
            yield RoundEvent(drafter="model", k=1, drafted=1, accepted=1)
            release.wait()  # the round in progress when the client leaves
            yield RoundEvent(drafter="model", k=1, drafted=1, accepted=1)
        finally:
            ended.append(True)

    spec: Any = SimpleNamespace(
        session=SimpleNamespace(last_stats=None), cache_client=None, batch=None
    )
    worker = Worker(spec, queue=1, finished=lambda stats: None)

    async def main() -> None:
        async with worker.turn():
            events = worker.events(generation, worker.spec)
            async for _ in events:
                break  # the client leaves
            await events.aclose()

    asyncio.run(main())
    threading.Timer(0.2, release.set).start()
    worker.close()
    assert ended
