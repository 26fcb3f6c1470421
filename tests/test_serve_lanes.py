"""Issue 63, defect 1: every generation of every endpoint, streamed or not, runs in the slot it
was handed, so that a greedy chat answer running beside it is its idle text; over fake models
in-process, two slots."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.engine.prediction import PredictionDrafter
from edgespec.server.app import create_app
from tests.fakes import FakeFimModel
from tests.test_serve import NAMES, post_scope

CHAT = {"messages": [{"role": "user", "content": "abcab"}], "max_tokens": 60, "temperature": 0}
FIM = {"prompt": "def f(a):\n", "suffix": "\n    return a\n", "max_tokens": 24, "temperature": 0}
INFILL = {"input_prefix": "def f(a):\n", "input_suffix": "\n    return a\n", "n_predict": 24}
# Each endpoint's request (greedy), by the path it is posted to.
ENDPOINTS = [
    ("/v1/chat/completions", {**CHAT, "max_tokens": 24}),
    ("/v1/completions", {"prompt": "abcab", "max_tokens": 24, "temperature": 0}),
    ("/v1/completions", FIM),
    ("/infill", {**INFILL, "temperature": 0}),
]


class Slow(FakeFimModel):
    """Each batch takes a moment, as a real pass does, so that requests overlap."""

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        threading.Event().wait(0.002)
        return super().decode_batch(requests)


def make_app(slots: int = 2) -> FastAPI:
    spec = Speculator(Slow(seed=4, n_ctx=512, sequences=2), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    return create_app(spec, model_names=NAMES, slots=slots)


async def post(app: FastAPI, path: str, doc: dict[str, Any]) -> tuple[int, bytes]:
    """POST `doc` to `path` straight to the ASGI app: the status and the whole body."""
    sent: list[dict[str, Any]] = []
    body = [{"type": "http.request", "body": json.dumps(doc).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if body:
            return body.pop()
        await asyncio.Event().wait()  # never disconnects
        return {}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(post_scope(path), receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def text_of(path: str, streamed: bool, body: bytes) -> str:
    """The answer's text, whole or put together from its events."""
    if not streamed:
        doc = json.loads(body)
        if path == "/infill":
            return str(doc["content"])
        choice = doc["choices"][0]
        return str(choice["message"]["content"] if "message" in choice else choice["text"])
    events = [
        json.loads(line[6:])
        for line in body.decode().split("\n\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    assert not [e for e in events if "error" in e], events
    if path == "/infill":
        return "".join(e["content"] for e in events)
    parts = [c["choices"][0] for c in events if c.get("choices")]
    return "".join(p["delta"].get("content") or "" if "delta" in p else p["text"] for p in parts)


def idle(path: str, doc: dict[str, Any]) -> str:
    """The text a request gets from a server that runs nothing else."""
    status, body = asyncio.run(post(make_app(), path, doc))
    assert status == 200, body
    return text_of(path, False, body)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("path", "doc"), ENDPOINTS, ids=["chat", "text", "suffix", "infill"])
def test_each_endpoint_runs_in_its_own_slot_beside_a_greedy_chat(
    path: str, doc: dict[str, Any], streamed: bool
) -> None:
    chat_alone, other_alone = idle("/v1/chat/completions", CHAT), idle(path, doc)
    app = make_app()

    async def scenario() -> list[tuple[int, bytes]]:
        chat = post(app, "/v1/chat/completions", CHAT)
        others = [post(app, path, {**doc, "stream": streamed}) for _ in range(2)]
        return await asyncio.wait_for(asyncio.gather(chat, *others), 60)

    (chat_status, chat), *others = asyncio.run(scenario())
    assert chat_status == 200, chat
    assert text_of("/v1/chat/completions", False, chat) == chat_alone
    for status, body in others:
        assert status == 200, body
        assert text_of(path, streamed, body) == other_alone
    assert app.state.worker.busy == 0 and app.state.worker.batch.active == 0


def test_a_predictions_index_is_built_outside_the_passes_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 63: indexing a long prediction (0.18 s for 32k tokens) held every slot's passes.
    app = make_app()
    lock = app.state.worker.batch.lock
    held: list[bool] = []
    real = PredictionDrafter.__init__

    def watched(self: PredictionDrafter, *args: Any, **kw: Any) -> None:
        held.append(lock._owner == threading.get_ident())
        real(self, *args, **kw)

    monkeypatch.setattr(PredictionDrafter, "__init__", watched)
    doc = {**CHAT, "prediction": {"type": "content", "content": "abcabcabc"}}
    status, _ = asyncio.run(post(app, "/v1/chat/completions", doc))
    assert status == 200 and held == [False]
