"""`edgespec serve --parallel N`: requests in slots whose target passes are shared, over fake
models in-process: a short request does not wait for a long one, a client that leaves frees its
slot and cells, clients keep to their own cells, a full queue is a 429, one slot's failure ends
its request alone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from starlette.testclient import TestClient

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.errors import EdgespecError
from edgespec.server.app import create_app
from tests.fakes import FakeTextModel
from tests.test_serve import NAMES, asgi_post

LONG = {"messages": [{"role": "user", "content": "abcabc"}], "max_tokens": 150, "temperature": 0}
SHORT = {"messages": [{"role": "user", "content": "dcba"}], "max_tokens": 8, "temperature": 0}


def _spec(model: FakeTextModel | None = None) -> Speculator:
    spec = Speculator(model or FakeTextModel(seed=4, n_ctx=256, sequences=4), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    return spec


def _text(sent: list) -> str:  # type: ignore[type-arg]
    import json

    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return str(json.loads(body)["choices"][0]["message"]["content"])


def _alone(doc: dict) -> str:  # type: ignore[type-arg]
    with TestClient(create_app(_spec(), model_names=NAMES), base_url="http://127.0.0.1:8080") as c:
        return str(
            c.post("/v1/chat/completions", json=doc).json()["choices"][0]["message"]["content"]
        )


class Slow(FakeTextModel):
    """Each batch takes a moment, as a real pass does, so that requests overlap."""

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        threading.Event().wait(0.002)
        return super().decode_batch(requests)


def test_a_short_request_joins_the_passes_of_a_long_one_and_ends_first() -> None:
    model = Slow(seed=4, n_ctx=256, sequences=2)
    app = create_app(_spec(model), model_names=NAMES, slots=2)
    worker = app.state.worker

    async def scenario() -> tuple[list, list, bool]:  # type: ignore[type-arg]
        long = asyncio.ensure_future(asgi_post(app, LONG, asyncio.Event()))
        while model.decode_calls < 10:
            await asyncio.sleep(0.005)
        short = await asyncio.wait_for(asgi_post(app, SHORT, asyncio.Event()), 20)
        ran_on = not long.done()
        return await asyncio.wait_for(long, 30), short, ran_on

    long, short, long_still_running = asyncio.run(scenario())
    assert long_still_running  # the short one did not wait for the long one to end
    assert any(len(b) == 2 for b in model.batches)
    assert _text(short) == _alone(SHORT) and _text(long) == _alone(LONG)
    assert worker.busy == 0 and worker.batch.active == 0


def test_a_client_that_leaves_frees_its_slot_and_its_cells() -> None:
    model = Slow(seed=4, n_ctx=256, sequences=2)
    app = create_app(_spec(model), model_names=NAMES, slots=2)
    worker = app.state.worker

    async def scenario() -> list:  # type: ignore[type-arg]
        gone = asyncio.Event()
        leaving = asyncio.ensure_future(asgi_post(app, {**LONG, "stream": True}, gone))
        while model.decode_calls < 10:
            await asyncio.sleep(0.005)
        gone.set()
        left = await asyncio.wait_for(leaving, 10)
        for _ in range(1000):  # the slot is handed back once its thread has wound down
            if not worker.busy:
                break
            await asyncio.sleep(0.01)
        return left

    asyncio.run(scenario())
    assert worker.busy == 0 and worker.batch.active == 0
    assert [model.seq_past(s) for s in (0, 1)] == [0, 0]
    assert model.decode_calls < 150  # it stopped long before its end


def test_each_client_keeps_to_its_own_cells() -> None:
    model = FakeTextModel(seed=4, n_ctx=256, sequences=2)
    spec = _spec(model)
    app = create_app(spec, model_names=NAMES, slots=2)
    worker = app.state.worker
    asks = [
        ({**SHORT, "user": user, "messages": [{"role": "user", "content": text}]}, user)
        for user, text in [("a", "abab"), ("b", "cdcd"), ("c", "bcbc"), ("a", "abab")]
    ]
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        for doc, _ in asks:
            assert client.post("/v1/chat/completions", json=doc).status_code == 200
    prompts = {user: spec.prompt_tokens(doc["messages"]) for doc, user in asks}
    for lane in worker._free:
        user = lane.cache_client[1]  # type: ignore[index]
        cells = model._seqs[lane.target.seq]
        # What a slot holds is its last client's own prompt (and answer), nobody else's.
        assert cells[: len(prompts[user])] == prompts[user]


def test_past_the_queue_a_request_gets_429_with_retry_after() -> None:
    model = Slow(seed=4, n_ctx=256, sequences=2)
    app = create_app(_spec(model), model_names=NAMES, slots=2, queue=1)

    async def scenario() -> list:  # type: ignore[type-arg]
        asks = [asgi_post(app, {**LONG, "max_tokens": 60}, asyncio.Event()) for _ in range(5)]
        return await asyncio.wait_for(asyncio.gather(*asks), 60)

    answers = asyncio.run(scenario())
    statuses = sorted(a[0]["status"] for a in answers)
    assert statuses == [200, 200, 200, 429, 429]  # two slots, one waiting, the rest refused
    busy = next(a for a in answers if a[0]["status"] == 429)
    assert (b"retry-after", b"1") in busy[0]["headers"]


class Poisoned(Slow):
    """A decode error for any batch that carries "ppp" (token 15 three times)."""

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        if any("15, 15, 15" in str(list(tokens)) for _, tokens, _ in requests):
            raise EdgespecError("llama_decode failed with code 1 (a batch of sequences)")
        return super().decode_batch(requests)


def test_one_slots_failure_ends_its_request_with_an_error_and_leaves_the_other() -> None:
    model = Poisoned(seed=4, n_ctx=256, sequences=2)
    app = create_app(_spec(model), model_names=NAMES, slots=2)
    bad = {**SHORT, "messages": [{"role": "user", "content": "ppp"}]}

    async def scenario() -> list:  # type: ignore[type-arg]
        long = asyncio.ensure_future(asgi_post(app, {**LONG, "max_tokens": 60}, asyncio.Event()))
        while model.decode_calls < 5:
            await asyncio.sleep(0.005)
        failed = await asyncio.wait_for(asgi_post(app, bad, asyncio.Event()), 20)
        return [await asyncio.wait_for(long, 30), failed]

    long, failed = asyncio.run(scenario())
    assert failed[0]["status"] == 500 and b"llama_decode failed" in failed[1]["body"]
    assert long[0]["status"] == 200
    assert _text(long) == _alone({**LONG, "max_tokens": 60})


@pytest.mark.parametrize("slots", [1, 2])
def test_greedy_answers_are_the_same_in_any_slot(slots: int) -> None:
    model = Slow(seed=4, n_ctx=256, sequences=2)
    app = create_app(_spec(model), model_names=NAMES, slots=slots)

    async def scenario() -> list:  # type: ignore[type-arg]
        docs = [LONG, SHORT, {**SHORT, "messages": [{"role": "user", "content": "bbc"}]}]
        return await asyncio.gather(*(asgi_post(app, d, asyncio.Event()) for d in docs))

    answers = asyncio.run(scenario())
    docs = [LONG, SHORT, {**SHORT, "messages": [{"role": "user", "content": "bbc"}]}]
    assert [_text(a) for a in answers] == [_alone(d) for d in docs]
