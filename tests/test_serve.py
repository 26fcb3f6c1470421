"""`edgespec serve`: the OpenAI API over fake models in-process (shapes, errors, auth, limits,
metrics) and over the real pair in a server subprocess (the official client, concurrency,
disconnects, SIGTERM)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from edgespec.api import Speculator
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
from edgespec.server.generation import Generation
from edgespec.server.openai import ChatRequest
from tests.conftest import ROOT, RealPair, closed_port, edgespec
from tests.fakes import FakeTextModel

NAMES = ["fake-pair", "fake.gguf", "edgespec"]
# Greedy, this fake model soon repeats itself, so n-gram lookup has something to draft.
CHAT = {"messages": [{"role": "user", "content": "abcabcabc"}], "max_tokens": 24, "temperature": 0}
MSG = b'{"messages": [{"role": "user", "content": "x"}], '
JSON = {"content-type": "application/json"}


def fake_app(**kw: object) -> TestClient:
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    # Clients name the address they called, as a local one does.
    app = create_app(spec, model_names=NAMES, **kw)  # type: ignore[arg-type]
    return TestClient(app, base_url="http://127.0.0.1:8080")


@pytest.fixture
def client() -> Iterator[TestClient]:
    with fake_app() as c:
        yield c


def sse(text: str) -> list[dict]:  # type: ignore[type-arg]
    lines = [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_chat_and_text_completions_have_openai_shapes(client: TestClient) -> None:
    body = client.post("/v1/chat/completions", json={**CHAT, "edgespec": {"drafter": "ngram"}})
    assert body.status_code == 200
    doc = body.json()
    assert doc["object"] == "chat.completion" and doc["model"] == "fake-pair"
    choice = doc["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    assert doc["usage"]["completion_tokens"] == 24
    assert doc["usage"]["total_tokens"] == doc["usage"]["prompt_tokens"] + 24
    block = doc["edgespec"]
    assert set(block) >= {"drafters", "drafted", "accepted", "acceptance", "tokens_per_s"}
    assert block["accepted"] <= block["drafted"] and "ngram" in block["drafters"]
    text = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 5})
    assert text.json()["object"] == "text_completion" and text.json()["choices"][0]["text"]
    models = client.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == NAMES and client.get("/health").status_code == 200


def test_a_stream_says_the_same_as_the_whole_answer(client: TestClient) -> None:
    whole = client.post("/v1/chat/completions", json=CHAT).json()["choices"][0]["message"][
        "content"
    ]
    stream = client.post(
        "/v1/chat/completions",
        json={**CHAT, "stream": True, "stream_options": {"include_usage": True}},
    )
    chunks = sse(stream.text)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length"
    assert "edgespec" in finals[0] and finals[0]["usage"]["completion_tokens"] == 24
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 24


@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        (b"{not json", 400, None, "not valid JSON"),
        (b'{"messages": "hi"}', 400, "messages", "messages"),
        (b'{"max_tokens": 5}', 400, "messages", "Field required"),
        (
            MSG + b'"temperature": "hot"}',
            400,
            "temperature",
            "",
        ),
        (
            MSG + b'"temperature": -1}',
            400,
            "temperature",
            "temperature must be >= 0",
        ),
        (
            MSG + b'"top_p": 0}',
            400,
            "top_p",
            "top-p must be in",
        ),
        (
            MSG + b'"max_tokens": 0}',
            400,
            "max_tokens",
            "--max-tokens must be >= 1",
        ),
        (MSG + b'"n": 2}', 400, "n", "n = 1"),
        (
            MSG + b'"edgespec": {"drafter": "magic"}}',
            400,
            "drafter",
            "unknown drafter",
        ),
        (
            MSG + b'"edgespec": {"drafter": "model"}}',
            400,
            "drafter",
            "needs a draft model",
        ),
        (
            MSG + b'"edgespec": {"k": -1}}',
            400,
            "edgespec.k",
            "must be >= 0",
        ),
        (
            MSG + b'"edgespec": {"k": 100000}}',
            400,
            "edgespec.k",
            "must be <= 32",
        ),
        (
            MSG + b'"model": "gpt-9"}',
            404,
            "model",
            "not served here",
        ),
    ],
)
def test_bad_requests_get_openai_error_bodies(
    client: TestClient, body: bytes, status: int, param: str | None, message: str
) -> None:
    res = client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert res.status_code == status
    error = res.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and message in error["message"]


def test_odd_requests_are_refused_not_failed(client: TestClient) -> None:
    def post(body: bytes, path: str = "/v1/chat/completions") -> dict:  # type: ignore[type-arg]
        res = client.post(path, content=body, headers=JSON)
        assert res.status_code == 400, res.text
        return dict(res.json()["error"])

    deep = b'{"messages": [{"role": "user", "content": "x"}], "stop": ' + b"[" * 100_000
    assert "nested too deeply" in post(deep + b"]" * 100_000 + b"}")["message"]
    lone = b'{"messages": [{"role": "user", "content": "a\\ud800"}]}'
    assert "surrogate" in post(lone)["message"]
    assert post(b'{"prompt": ""}', "/v1/completions")["param"] == "prompt"
    many = json.dumps({**CHAT, "stop": [f"s{i}" for i in range(50_000)]}).encode()
    assert post(many)["param"] == "stop"
    assert post(json.dumps({**CHAT, "stop": "s" * 10_000}).encode())["param"] == "stop"
    wrong_method = client.get("/v1/chat/completions")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


def test_a_tiny_temperature_decodes_greedily(client: TestClient) -> None:
    # 1 / 1e-320 overflows: such a temperature means the argmax, as temperature 0 does.
    answers = [
        client.post("/v1/chat/completions", json={**CHAT, "temperature": t}).json()
        for t in (0, 1e-320)
    ]
    assert answers[1]["choices"][0]["message"] == answers[0]["choices"][0]["message"]


def test_limits_a_big_body_and_a_long_prompt(client: TestClient) -> None:
    big = client.post(
        "/v1/completions", content=b'{"prompt": "' + b"a" * 2_000_000 + b'"}', headers=JSON
    )
    assert big.status_code == 413 and "larger than 1000000 bytes" in big.json()["error"]["message"]
    long = client.post("/v1/completions", json={"prompt": "ab" * 200, "max_tokens": 4})
    assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
    assert "the prompt has 400 tokens but the context holds 256" in long.json()["error"]["message"]


def test_an_api_key_is_required_when_set() -> None:
    with fake_app(api_key="s3cret") as c:
        assert c.get("/v1/models").status_code == 401
        wrong = c.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_only_json_declared_as_json_is_read(client: TestClient) -> None:
    # A web page can send text/plain anywhere without a preflight; the body must not be read.
    body = json.dumps(CHAT).encode()
    plain = client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 415 and "application/json" in plain.json()["error"]["message"]
    charset = {"content-type": "application/json; charset=utf-8"}
    assert client.post("/v1/chat/completions", content=body, headers=charset).status_code == 200


def test_only_this_machines_names_and_allowed_origins_are_served(client: TestClient) -> None:
    # A page on another site, or a name of its own rebound to 127.0.0.1, cannot drive it.
    rebound = client.post("/v1/chat/completions", json=CHAT, headers={"host": "evil.example"})
    assert rebound.status_code == 403 and "--host" in rebound.json()["error"]["message"]
    page = client.post("/v1/chat/completions", json=CHAT, headers={"origin": "http://evil.example"})
    assert page.status_code == 403 and "--cors" in page.json()["error"]["message"]
    for name in ("localhost:8080", "127.0.0.1", "[::1]:8080"):
        assert client.get("/v1/models", headers={"host": name}).status_code == 200, name
    with fake_app(host="box.lan") as named:
        assert named.get("/v1/models", headers={"host": "box.lan:8080"}).status_code == 200
        assert named.get("/v1/models", headers={"host": "evil.example"}).status_code == 403
    with fake_app(host="0.0.0.0") as everywhere:
        assert everywhere.get("/v1/models", headers={"host": "10.0.0.7:8080"}).status_code == 200


def test_cors_lets_the_named_origin_call() -> None:
    origin = {"origin": "http://localhost:3000"}
    with fake_app(cors=["http://localhost:3000"]) as c:
        res = c.post("/v1/chat/completions", json=CHAT, headers=origin)
        assert res.status_code == 200
        assert res.headers["access-control-allow-origin"] == "http://localhost:3000"
        ask = {**origin, "access-control-request-method": "POST",
               "access-control-request-headers": "content-type"}  # fmt: skip
        assert c.options("/v1/chat/completions", headers=ask).status_code == 200
        other = c.post("/v1/chat/completions", json=CHAT, headers={"origin": "http://x.example"})
        assert other.status_code == 403


def test_a_cors_value_that_is_no_origin_is_one_line(isolated: dict[str, str]) -> None:
    result = edgespec("serve", "--cors", "localhost:3000", env=isolated, timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "edgespec: error: --cors 'localhost:3000' is not an origin like http://localhost:3000"
    ]


def test_queue_zero_still_serves_when_nothing_runs() -> None:
    with fake_app(queue=0) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_checking_a_request_leaves_the_running_generation_alone() -> None:
    # Requests are checked before their turn: checking one must not change the K cap that
    # auto uses for the generation running now (each generation starts its own policy).
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1}, 0.2), use_model=False)
    _, running = spec.strategy("auto", 7)
    assert isinstance(running, AdaptiveDraftLength)
    Generation(spec, ChatRequest.model_validate({**CHAT, "edgespec": {"k": 3}}))
    _, other = spec.strategy("auto", 3)
    assert running.k_max == 7 and isinstance(other, AdaptiveDraftLength) and other.k_max == 3


def test_metrics_are_served_only_when_asked_for() -> None:
    # Issue 63: their counters are every client's together, so they are the operator's choice.
    with fake_app() as c:
        assert c.get("/metrics").status_code == 404
    with fake_app(metrics=True) as c:
        assert c.get("/metrics").status_code == 200


def test_metrics_count_what_was_served() -> None:
    with fake_app(metrics=True) as client:
        for _ in range(3):
            client.post("/v1/chat/completions", json={**CHAT, "edgespec": {"drafter": "ngram"}})
        client.post("/v1/chat/completions", content=b"{", headers=JSON)
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        value = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families.values()
            for s in f.samples
        }
        ok = ("edgespec_requests_total", (("endpoint", "/v1/chat/completions"), ("status", "200")))
        bad = ("edgespec_requests_total", (("endpoint", "/v1/chat/completions"), ("status", "400")))
        assert value[ok] == 3 and value[bad] == 1
        assert value[("edgespec_tokens_generated_total", ())] == 72
        drafted = value[("edgespec_tokens_drafted_total", (("drafter", "ngram"),))]
        accepted = value[("edgespec_tokens_accepted_total", (("drafter", "ngram"),))]
        assert 0 < accepted <= drafted
        assert value[("edgespec_queue_length", ())] == 0


def test_made_up_paths_neither_grow_the_metrics_nor_reach_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from edgespec.cli.serve_cmd import _log_line

    with fake_app(log=_log_line, metrics=True) as c:
        for n in range(20):
            assert c.get(f"/made-up-{n}").status_code == 404
        assert c.get("/%1b%5b2J%07").status_code == 404
        text = c.get("/metrics").text
    endpoints = {
        s.labels["endpoint"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "edgespec_requests_total"
    }
    assert endpoints == {"other"}
    logged = capsys.readouterr().err
    assert "\x1b" not in logged and "\x07" not in logged
    assert "GET /\\x1b[2J\\x07 404" in logged


def test_an_unexpected_error_is_counted_and_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 50, defect 7: a 500 was missing from the metrics and the access log.
    def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("edgespec.server.generation.structure", broken)
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1}, 0.2), use_model=False)
    logged: list[tuple[str, int]] = []
    app = create_app(
        spec, model_names=NAMES, log=lambda *line: logged.append(line[1:3]), metrics=True
    )
    with TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False) as c:
        res = c.post("/v1/chat/completions", json=CHAT)
        text = c.get("/metrics").text
    assert res.status_code == 500, res.text
    assert res.json()["error"] == {
        "message": "internal error: RuntimeError",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert logged == [("/v1/chat/completions", 500), ("/metrics", 200)]
    counted = {
        s.labels["status"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "edgespec_requests_total" and s.labels["endpoint"] == "/v1/chat/completions"
    }
    assert counted == {"500": 1}


def test_clients_draft_from_their_own_earlier_answers_only() -> None:
    def session_after(asks: list[dict], **kw: object) -> int:  # type: ignore[type-arg]
        """How many tokens the drafter's session holds after these requests, in order."""
        with fake_app(**kw) as c:
            for ask in asks:
                headers = ask.pop("headers", {})
                assert c.post("/v1/chat/completions", json=ask, headers=headers).status_code == 200
            spec = c.app.state.worker.spec  # type: ignore[attr-defined]
            # The last request's client, as the server names it (a digest of its API key).
            key = hashlib.sha256(headers.get("authorization", "").encode()).hexdigest()
            client = None if kw.get("shared_memory") else (key, ask.get("user", ""))
            return int(spec.auto_learned.memory.session(client).tokens)

    alone = session_after([{**CHAT, "user": "b"}])
    assert session_after([{**CHAT, "user": "a"}, {**CHAT, "user": "b"}]) == alone
    keys = [{**CHAT, "headers": {"authorization": f"Bearer {key}"}} for key in "xy"]
    assert session_after(keys) == alone
    # A client's own earlier answers stay with it.
    again = [{**CHAT, "user": "a"}, {**CHAT, "user": "b"}, {**CHAT, "user": "a"}]
    assert session_after(again) == 2 * alone
    both = [{**CHAT, "user": "a"}, {**CHAT, "user": "b"}]
    assert session_after(both, shared_memory=True) == 2 * alone


class Gate(FakeTextModel):
    """Decodes `free` times, then holds every decode until the test opens it."""

    def __init__(self, free: int, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.free = free
        self.reached, self.opened = threading.Event(), threading.Event()

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        if self.decode_calls >= self.free:
            self.reached.set()
            self.opened.wait(60)
        return super().decode(tokens, n_logits)


def post_scope(path: str) -> dict:  # type: ignore[type-arg]
    """The ASGI scope of a JSON POST to `path` from a loopback client."""
    headers = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")]
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080),
    }  # fmt: skip


async def asgi_post(app: object, doc: dict, gone: asyncio.Event, stalled: bool = False) -> list:  # type: ignore[type-arg]
    """POST `doc` straight to the ASGI app: the client disconnects when `gone` is set and, if
    `stalled`, never takes a chunk of the body. The messages sent back."""
    sent: list[dict] = []  # type: ignore[type-arg]
    body = [{"type": "http.request", "body": json.dumps(doc).encode(), "more_body": False}]

    async def receive() -> dict:  # type: ignore[type-arg]
        if body:
            return body.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:  # type: ignore[type-arg]
        if stalled and message["type"] == "http.response.body":
            await asyncio.Event().wait()
        sent.append(message)

    await app(post_scope("/v1/chat/completions"), receive, send)  # type: ignore[operator]
    return sent


def test_clients_that_leave_stop_their_generation_and_leave_the_queue() -> None:
    model = Gate(free=3, seed=4, n_ctx=256)
    spec = Speculator(model, None)
    generations: list[object] = []
    stream = spec.stream
    spec.stream = lambda *a, **kw: generations.append(a) or stream(*a, **kw)  # type: ignore[method-assign]
    logged: list[int] = []
    app = create_app(spec, model_names=NAMES, log=lambda *line: logged.append(line[2]))
    worker = app.state.worker
    ask = {**CHAT, "max_tokens": 100, "edgespec": {"drafter": "none"}}

    async def scenario() -> tuple[list, list]:  # type: ignore[type-arg]
        running_gone, waiting_gone = asyncio.Event(), asyncio.Event()
        running = asyncio.ensure_future(asgi_post(app, ask, running_gone))
        assert await asyncio.to_thread(model.reached.wait, 10)  # generating, its decode held
        waiting = asyncio.ensure_future(asgi_post(app, ask, waiting_gone))
        while worker.waiting < 1:
            await asyncio.sleep(0.01)
        waiting_gone.set()
        running_gone.set()
        # Both are answered while the running one's decode is still held.
        answers = await asyncio.wait_for(asyncio.gather(running, waiting), 10)
        model.opened.set()
        async with worker.turn():  # the generation wound down and handed the turn on
            pass
        return answers[0], answers[1]

    running, waiting = asyncio.run(scenario())
    assert running[0]["status"] == 499 and waiting[0]["status"] == 499
    assert logged == [499, 499]  # one log line each
    assert len(generations) == 1  # the one that waited never ran
    assert model.decode_calls <= model.free + 2  # the running one stopped within a round


def test_a_stream_is_logged_once_whether_its_client_leaves_or_takes_it_all() -> None:
    model = Gate(free=3, seed=4, n_ctx=256)
    logged: list[tuple[int, bool]] = []
    app = create_app(
        Speculator(model, None),
        model_names=NAMES,
        log=lambda *line: logged.append((line[2], line[3] is not None)),
    )
    ask = {**CHAT, "max_tokens": 100, "stream": True, "edgespec": {"drafter": "none"}}

    async def scenario() -> list:  # type: ignore[type-arg]
        gone = asyncio.Event()
        leaving = asyncio.ensure_future(asgi_post(app, ask, gone))
        assert await asyncio.to_thread(model.reached.wait, 10)  # streaming, its decode held
        gone.set()
        left = await asyncio.wait_for(leaving, 10)
        model.opened.set()
        short = {**ask, "max_tokens": 8}
        whole = await asyncio.wait_for(asgi_post(app, short, asyncio.Event()), 10)
        return [left, whole]

    left, whole = asyncio.run(scenario())
    assert left[0]["status"] == 200 and whole[-1]["more_body"] is False
    # As for whole answers: 499 without stats for the one that left, 200 with them otherwise.
    assert logged == [(499, False), (200, True)]


def test_a_client_that_leaves_while_sending_its_body_is_logged_as_499() -> None:
    logged: list[int] = []
    app = create_app(
        Speculator(FakeTextModel(seed=4, n_ctx=256), None),
        model_names=NAMES,
        log=lambda *line: logged.append(line[2]),
    )
    parts = [
        {"type": "http.disconnect"},
        {"type": "http.request", "body": b'{"prompt": ', "more_body": True},
    ]
    sent: list[dict] = []  # type: ignore[type-arg]

    async def receive() -> dict:  # type: ignore[type-arg]
        return parts.pop()

    async def send(message: dict) -> None:  # type: ignore[type-arg]
        sent.append(message)

    # No exception (it was a traceback in the log).
    asyncio.run(app(post_scope("/v1/completions"), receive, send))
    assert logged == [499]


def test_a_stream_whose_client_stops_reading_frees_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("edgespec.server.streaming.READER_LAG_S", 0.5)
    app = create_app(Speculator(FakeTextModel(seed=4, n_ctx=256), None), model_names=NAMES)
    plain = {**CHAT, "edgespec": {"drafter": "none"}}
    never = asyncio.Event

    async def scenario() -> list:  # type: ignore[type-arg]
        stalled = asyncio.ensure_future(
            asgi_post(app, {**plain, "max_tokens": 200, "stream": True}, never(), stalled=True)
        )
        try:
            return await asyncio.wait_for(asgi_post(app, plain, never()), 10)
        finally:
            stalled.cancel()

    answer = asyncio.run(scenario())
    assert answer[0]["status"] == 200, answer


@contextmanager
def live(app: object) -> Iterator[int]:
    """`app` served by uvicorn with serve's settings on a loopback port, in a thread."""
    import uvicorn

    from edgespec.cli.serve_cmd import server_config

    port = free_port()
    server = uvicorn.Server(server_config(app, "127.0.0.1", port))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_client_that_sends_its_headers_slowly_is_cut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("edgespec.server.protocol.HEAD_TIMEOUT_S", 0.5)
    app = create_app(Speculator(FakeTextModel(seed=4, n_ctx=256), None), model_names=NAMES)
    with live(app) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert s.recv(4096) == b""  # closed within the socket's 10 s, not held open
    # A client that sends its request at once is served as before.
    with live(app) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_client_that_sends_its_body_slowly_gets_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("edgespec.server.body.BODY_TIMEOUT_S", 0.5)
    app = create_app(Speculator(FakeTextModel(seed=4, n_ctx=256), None), model_names=NAMES)
    with live(app) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        reply = s.recv(4096)  # within the socket's 10 s, rather than waiting for the rest
    assert reply.startswith(b"HTTP/1.1 408"), reply


def test_a_stream_whose_generation_fails_unexpectedly_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("edgespec.server.completions.stream", broken)
    app = create_app(Speculator(FakeTextModel(seed=4, n_ctx=256), None), model_names=NAMES)
    ask = {**CHAT, "stream": True, "edgespec": {"drafter": "none"}}
    # Answered (cut short) within 10 s, rather than waiting for chunks that never come.
    sent = asyncio.run(asyncio.wait_for(asgi_post(app, ask, asyncio.Event()), 10))
    assert sent[0]["status"] == 200 and sent[-1]["more_body"] is False


# --- a real server subprocess on the real pair, over loopback ------------------------------


@dataclass
class Server:
    proc: subprocess.Popen  # type: ignore[type-arg]
    url: str

    def post(self, path: str, doc: dict, timeout: float = 120) -> tuple[int, dict, dict]:  # type: ignore[type-arg]
        request = urllib.request.Request(
            self.url + path, json.dumps(doc).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as res:
                return res.status, _lower(res.headers), json.loads(res.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _lower(exc.headers), json.loads(exc.read())


def _lower(headers: object) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(headers).items()}  # type: ignore[call-overload]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(real_pair: RealPair, *extra: str) -> Iterator[Server]:
    port = free_port()
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [sys.executable, "-m", "edgespec", "serve", "--target", str(real_pair.target)]
    cmd += ["--draft", str(real_pair.draft), "--port", str(port), "--ctx-size", "2048", *extra]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    server = Server(proc, f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(server.url + "/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.3)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err


PROMPT = "Write a Python function that returns the square of a number."
NONE = {"edgespec": {"drafter": "none"}}  # plain decoding: exactly reproducible


@pytest.mark.real
def test_the_openai_client_gets_what_edgespec_run_prints(real_pair: RealPair) -> None:
    from openai import OpenAI

    run = edgespec(
        "run", PROMPT, "--target", str(real_pair.target), "--draft", str(real_pair.draft),
        "--max-tokens", "24", "--drafter", "none",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with serving(real_pair) as server:
        client = OpenAI(base_url=server.url + "/v1", api_key="unused")
        messages = [{"role": "user", "content": PROMPT}]
        chat = client.chat.completions.create(
            model="edgespec", messages=messages, temperature=0, max_tokens=24, extra_body=NONE
        )  # type: ignore[call-overload]
        text = chat.choices[0].message.content
        assert text.rstrip("\n") == run.stdout.rstrip("\n")
        assert chat.usage.completion_tokens == 24 and chat.choices[0].finish_reason == "length"
        block = chat.model_extra["edgespec"]
        assert block["drafters"]["none"]["rounds"] == 24 and block["tokens_per_s"] > 0
        stream = client.chat.completions.create(
            model="edgespec",
            messages=messages,
            temperature=0,
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=NONE,
        )  # type: ignore[call-overload]
        chunks = list(stream)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == text and chunks[-1].usage.completion_tokens == 24
        # auto (the default) speculates on a prompt it can copy from, and says so.
        code = "def square(x):\n    return x * x\n"
        auto = client.chat.completions.create(
            model="edgespec",
            temperature=0,
            max_tokens=40,
            messages=[{"role": "user", "content": f"Repeat this code exactly:\n{code}"}],
        )  # type: ignore[call-overload]
        info = auto.model_extra["edgespec"]
        assert info["accepted"] <= info["drafted"] and auto.usage.completion_tokens <= 40
        completion = client.completions.create(
            model="edgespec", prompt="def square(x):", temperature=0, max_tokens=8, extra_body=NONE
        )  # type: ignore[call-overload]
        assert completion.choices[0].text and completion.usage.completion_tokens <= 8
        pieces = client.completions.create(
            model="edgespec",
            prompt="def square(x):",
            temperature=0,
            max_tokens=8,
            stream=True,
            extra_body=NONE,
        )  # type: ignore[call-overload]
        assert "".join(p.choices[0].text for p in pieces if p.choices) == completion.choices[0].text


@pytest.mark.real
def test_concurrent_clients_are_all_answered_in_turn(real_pair: RealPair) -> None:
    prompts = [f"Name {n} animals, comma separated." for n in range(2, 6)]

    def ask(server: Server, prompt: str, stream: bool) -> str:
        doc = {"messages": [{"role": "user", "content": prompt}], "temperature": 0}
        doc |= {"max_tokens": 12, **NONE}
        if not stream:
            status, _, body = server.post("/v1/chat/completions", doc)
            assert status == 200, body
            return str(body["choices"][0]["message"]["content"])
        request = urllib.request.Request(
            server.url + "/v1/chat/completions",
            json.dumps({**doc, "stream": True}).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as res:
            chunks = sse(res.read().decode())
        return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])

    with serving(real_pair) as server:
        expected = {p: ask(server, p, False) for p in prompts}
        jobs = [(p, i % 2 == 0) for i in range(8) for p in prompts]  # 8 clients x 4 requests
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda job: (job[0], ask(server, *job)), jobs))
        assert len(answers) == 32
        assert all(text == expected[p] for p, text in answers)


@pytest.mark.real
def test_a_full_queue_is_429_and_disconnects_leave_the_next_answer_exact(
    real_pair: RealPair,
) -> None:
    doc = {"messages": [{"role": "user", "content": PROMPT}], "temperature": 0, **NONE}
    # One slot, so that the queue of one fills behind the one running request.
    with serving(real_pair, "--queue", "1", "--parallel", "1", "--metrics") as server:
        _, _, first = server.post("/v1/chat/completions", {**doc, "max_tokens": 16})
        expected = first["choices"][0]["message"]["content"]
        for after in (1, 5, 20):
            with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as s:
                body = json.dumps({**doc, "max_tokens": 200, "stream": True}).encode()
                s.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\n\r\n" + body
                )  # fmt: skip
                seen = b""
                while seen.count(b"data: ") < after:
                    seen += s.recv(4096)
            _, _, again = server.post("/v1/chat/completions", {**doc, "max_tokens": 16})
            assert again["choices"][0]["message"]["content"] == expected, after
        # Each abandoned stream (200 tokens asked) stopped within a round of its client leaving.
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as res:
            metrics = res.read().decode()
        generated = next(
            s.value
            for f in text_string_to_metric_families(metrics)
            for s in f.samples
            if s.name == "edgespec_tokens_generated_total"
        )
        assert generated <= 4 * 16 + (1 + 5 + 20) + 3 * 20, generated
        long = {**doc, "max_tokens": 48}
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda _: server.post("/v1/chat/completions", long), range(4)))
        statuses = sorted(r[0] for r in results)
        assert 200 in statuses and 429 in statuses
        busy = next(r for r in results if r[0] == 429)
        assert busy[1].get("retry-after") == "1" and busy[2]["error"]["type"] == "rate_limit_error"


@pytest.mark.real
def test_sigterm_during_a_stream_exits_cleanly(real_pair: RealPair) -> None:
    with serving(real_pair) as server:
        request = urllib.request.Request(
            server.url + "/v1/completions",
            json.dumps({"prompt": "def fib(n):", "max_tokens": 40, "stream": True}).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as res:
            res.readline()  # the first chunk is here: the generation runs
            server.proc.send_signal(signal.SIGTERM)
            rest = res.read().decode()
        assert rest.rstrip().endswith("data: [DONE]")  # the stream was finished, not cut
    # `serving` checked: exit status 0, no traceback.


def test_only_loopback_addresses_count_as_private() -> None:
    from edgespec.cli.serve_cmd import _loopback

    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("192.168.1.5") and not _loopback("example")
