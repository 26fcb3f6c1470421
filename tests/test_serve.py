"""`edgespec serve`: the OpenAI API over fake models in-process (shapes, errors, auth, limits,
metrics) and over the real pair in a server subprocess (the official client, concurrency,
disconnects, SIGTERM)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from edgespec.api import Speculator
from edgespec.planner.costs import CostModel
from edgespec.server.app import create_app
from tests.fakes import FakeTextModel

NAMES = ["fake-pair", "fake.gguf", "edgespec"]
# Greedy, this fake model soon repeats itself, so n-gram lookup has something to draft.
CHAT = {"messages": [{"role": "user", "content": "abcabcabc"}], "max_tokens": 24, "temperature": 0}
MSG = b'{"messages": [{"role": "user", "content": "x"}], '


def fake_app(**kw: object) -> TestClient:
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    return TestClient(create_app(spec, model_names=NAMES, **kw))  # type: ignore[arg-type]


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
    assert "edgespec" in finals[0] and chunks[-1]["choices"] == []
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


def test_limits_a_big_body_and_a_long_prompt(client: TestClient) -> None:
    big = client.post("/v1/completions", content=b'{"prompt": "' + b"a" * 2_000_000 + b'"}')
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


def test_metrics_count_what_was_served(client: TestClient) -> None:
    for _ in range(3):
        client.post("/v1/chat/completions", json={**CHAT, "edgespec": {"drafter": "ngram"}})
    client.post("/v1/chat/completions", content=b"{")
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
