"""Issue 63, defect 1: every generation of every endpoint, streamed or not, runs in the slot it
was handed, so that a greedy chat answer running beside it is its idle text; over fake models
in-process, two slots, and once on the real pair in a server subprocess."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.bench.runner import NEAR_TIE
from edgespec.engine.prediction import PredictionDrafter
from edgespec.server.app import create_app
from tests.conftest import RealPair
from tests.fakes import FakeFimModel
from tests.test_serve import NAMES, Server, post_scope, serving

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


CHAT_PATH = "/v1/chat/completions"
REAL_CHAT = {
    "messages": [{"role": "user", "content": "Write a Python function that reverses a list."}],
    "max_tokens": 200,
    "temperature": 0,
    "logprobs": True,
    "top_logprobs": 5,
}
GREEDY = {"max_tokens": 24, "temperature": 0}
BEFORE, AFTER = "def mean(xs):\n    ", "\n\nprint(mean([1, 2, 3]))\n"
REAL = [
    (CHAT_PATH, {"messages": [{"role": "user", "content": "Name three colours."}], **GREEDY}),
    ("/v1/completions", {"prompt": "def square(x):\n", **GREEDY}),
    ("/v1/completions", {"prompt": BEFORE, "suffix": AFTER, **GREEDY}),
    ("/infill", {"input_prefix": BEFORE, "input_suffix": AFTER, "n_predict": 24, "temperature": 0}),
]


def http_post(server: Server, path: str, doc: dict[str, Any]) -> bytes:
    request = urllib.request.Request(
        server.url + path, json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as res:
        assert res.status == 200
        return bytes(res.read())


@pytest.mark.real
def test_on_the_real_pair_each_endpoint_beside_a_greedy_chat_keeps_both_answers(
    real_pair: RealPair,
) -> None:
    # On llama.cpp a generation outside its slot decoded in a sequence another slot was using
    # (two threads in llama_decode on one context). Each endpoint, streamed and not, two at a
    # time beside a long greedy chat.
    with serving(real_pair, "--parallel", "3") as server:
        chat_alone = http_post(server, CHAT_PATH, REAL_CHAT)
        alone = [text_of(path, False, http_post(server, path, doc)) for path, doc in REAL]
        with ThreadPoolExecutor(1) as chat_pool, ThreadPoolExecutor(2) as pool:
            chat = chat_pool.submit(http_post, server, CHAT_PATH, REAL_CHAT)
            runs = [
                (i, streamed, pool.submit(http_post, server, path, {**doc, "stream": streamed}))
                for i, (path, doc) in enumerate(REAL)
                for streamed in (False, True)
            ]
            answers = [(i, streamed, run.result(600)) for i, streamed, run in runs]
            chat_beside = chat.result(600)
    assert same_or_near_tie(json.loads(chat_alone), json.loads(chat_beside))
    for i, streamed, body in answers:
        assert text_of(REAL[i][0], streamed, body) == alone[i], (REAL[i], streamed)


def same_or_near_tie(alone: dict[str, Any], beside: dict[str, Any]) -> bool:
    """The same tokens, or a first difference where the target's two logits nearly tie: a
    batch of another shape may round them the other way (llama.cpp's kernels; near_tie)."""
    ours = alone["choices"][0]["logprobs"]["content"]
    theirs = beside["choices"][0]["logprobs"]["content"]
    pairs = zip(ours, theirs, strict=False)
    at = next((i for i, (a, b) in enumerate(pairs) if a["bytes"] != b["bytes"]), None)
    if at is None:
        return len(ours) == len(theirs)
    here = ours[at]
    other = [t["logprob"] for t in here["top_logprobs"] if t["bytes"] == theirs[at]["bytes"]]
    best = max([here["logprob"], *(t["logprob"] for t in here["top_logprobs"])])
    return bool(other) and best - min(here["logprob"], other[0]) < NEAR_TIE
