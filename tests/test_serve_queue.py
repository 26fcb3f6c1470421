"""Issue 63: the queue's share per client (a client that fills the queue gives a place to
another's request, and a freed slot goes to the client served least recently), and a request
refused for a full queue costs no tokenizing. On the worker alone, and in-process on fakes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from edgespec.server.worker import QueueFull, Worker
from tests.test_serve import CHAT, fake_app


def lane() -> Any:
    return SimpleNamespace(session=SimpleNamespace(last_stats=None), cache_client=None, batch=None)


def served(queue: int, asks: list[str]) -> list[str]:
    """In which order one slot serves `asks` (each named by its client's letter and a number),
    sent in order while the first holds the slot; a refused one as `NAME:429`."""
    order: list[str] = []

    async def main() -> None:
        worker = Worker(lane(), queue=queue, finished=lambda stats: None)
        hold = asyncio.Event()

        async def ask(name: str) -> None:
            try:
                async with worker.turn(name[0]):
                    order.append(name)
                    if name == asks[0]:
                        await hold.wait()
            except QueueFull:
                order.append(f"{name}:429")

        tasks = []
        for name in asks:
            tasks.append(asyncio.ensure_future(ask(name)))
            await asyncio.sleep(0)  # each in the queue before the next comes
        hold.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return order


def test_one_client_cannot_fill_the_queue_against_another() -> None:
    # A fills the queue; B's request takes A's newest place and is served before A's others.
    order = served(3, ["a1", "a2", "a3", "a4", "b1"])
    assert order == ["a1", "a4:429", "b1", "a2", "a3"]


def test_the_slot_goes_round_the_waiting_clients() -> None:
    order = served(6, ["a1", "a2", "a3", "b1", "b2", "c1"])
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_one_client_alone_gets_the_whole_queue_and_no_more() -> None:
    assert served(2, ["a1", "a2", "a3", "a4"]) == ["a1", "a4:429", "a2", "a3"]
    # Shares that are even already are kept: the newcomer is refused.
    assert served(2, ["a1", "a2", "b1", "b2"]) == ["a1", "b2:429", "b1", "a2"]


def test_a_request_refused_for_a_full_queue_is_not_tokenized() -> None:
    with fake_app() as client:
        tokenized: list[object] = []
        spec = client.app.state.worker.spec  # type: ignore[attr-defined]
        real = spec.prompt_tokens
        spec.prompt_tokens = lambda *a, **kw: tokenized.append(a) or real(*a, **kw)
        client.app.state.worker.full = lambda client: True  # type: ignore[attr-defined]
        for stream in (False, True):
            res = client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
            assert res.status_code == 429, res.text
        assert tokenized == []
