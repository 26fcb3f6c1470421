"""Logprobs through `edgespec serve`, over fake models in-process: chat's `logprobs.content`
and text completions' legacy lists, streamed and not, with the target's own numbers, only for
returned text, and OpenAI's 400s for what is out of range; also through the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from edgespec.api import Speculator
from edgespec.engine.events import TokenEvent
from edgespec.server.logprobs import Logprobs
from tests.fakes import FakeModel, FakeTextModel
from tests.test_logprobs import reference
from tests.test_serve import CHAT, fake_app, sse


@pytest.fixture
def client() -> Iterator[TestClient]:
    with fake_app() as c:
        yield c


def spec_of(client: TestClient) -> Speculator:
    spec = client.app.state.worker.spec  # type: ignore[attr-defined]
    assert isinstance(spec, Speculator)
    return spec


def chat(client: TestClient, **fields: Any) -> dict[str, Any]:
    res = client.post("/v1/chat/completions", json={**CHAT, **fields})
    assert res.status_code == 200, res.text
    return dict(res.json())


def streamed_entries(client: TestClient, path: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every chunk's choice, for a streamed request."""
    res = client.post(path, json={**doc, "stream": True})
    assert res.status_code == 200, res.text
    return [c["choices"][0] for c in sse(res.text) if c.get("choices")]


def expected(client: TestClient, prompt: list[int], tokens: list[int], top: int) -> list[Any]:
    """(logprob, top ids, top logprobs) of each token, from the fake target's own table."""
    target = spec_of(client).target
    assert isinstance(target, FakeTextModel)
    out = []
    for i, tok in enumerate(tokens):
        logp, best = reference(target.logits_for([*prompt, *tokens[:i]]), top)
        out.append((logp[tok], best, logp[best]))
    return out


def chat_prompt(client: TestClient) -> list[int]:
    return list(spec_of(client).prompt_tokens(CHAT["messages"]))  # type: ignore[arg-type]


def ids(client: TestClient, entries: list[dict[str, Any]]) -> list[int]:
    # FakeTextModel: token i is the letter ALPHABET[i]
    return [ord(bytes(e["bytes"]).decode()) - ord("a") for e in entries]


@pytest.mark.parametrize("drafter", ["none", "auto", "ngram"])
def test_chat_logprobs_are_the_target_s_at_each_returned_token(
    client: TestClient, drafter: str
) -> None:
    doc = chat(client, logprobs=True, top_logprobs=3, edgespec={"drafter": drafter})
    choice = doc["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == doc["usage"]["completion_tokens"] == 24
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    tokens = ids(client, content)
    for entry, (logp, best, best_logp) in zip(
        content, expected(client, chat_prompt(client), tokens, 3), strict=True
    ):
        assert entry["logprob"] == pytest.approx(logp, abs=1e-6)
        assert [ids(client, [a])[0] for a in entry["top_logprobs"]] == best
        assert [a["logprob"] for a in entry["top_logprobs"]] == pytest.approx(best_logp, abs=1e-6)
        assert all(a["bytes"] == list(a["token"].encode()) for a in entry["top_logprobs"])


def test_speculation_reports_plain_decoding_s_logprobs_streamed_or_not(
    client: TestClient,
) -> None:
    fields = {"logprobs": True, "top_logprobs": 5}
    plain = chat(client, **fields, edgespec={"drafter": "none"})["choices"][0]["logprobs"]
    auto = chat(client, **fields, edgespec={"drafter": "auto"})
    assert auto["edgespec"]["accepted"] > 0  # drafted tokens among them
    assert auto["choices"][0]["logprobs"] == plain
    chunks = streamed_entries(client, "/v1/chat/completions", {**CHAT, **fields})
    assert chunks[0]["logprobs"] is None  # the role's chunk
    streamed = [e for c in chunks if c["logprobs"] for e in c["logprobs"]["content"]]
    assert streamed == plain["content"]
    # each chunk reports the tokens whose text it carries
    for c in chunks:
        if c["delta"].get("content"):
            assert "".join(e["token"] for e in c["logprobs"]["content"]) == c["delta"]["content"]


def test_without_logprobs_there_are_none(client: TestClient) -> None:
    assert chat(client)["choices"][0]["logprobs"] is None
    assert chat(client, logprobs=False)["choices"][0]["logprobs"] is None
    chunks = streamed_entries(client, "/v1/chat/completions", CHAT)
    assert all(c["logprobs"] is None for c in chunks)


def test_top_logprobs_zero_gives_the_token_s_logprob_alone(client: TestClient) -> None:
    content = chat(client, logprobs=True)["choices"][0]["logprobs"]["content"]
    assert content and all(e["top_logprobs"] == [] for e in content)
    assert all(e["logprob"] < 0 for e in content)


def test_a_stop_string_leaves_out_the_tokens_whose_text_is_not_returned(
    client: TestClient,
) -> None:
    text = chat(client)["choices"][0]["message"]["content"]
    stop = text[6:8]  # one letter per token: the first two letters of the stop are held back
    assert stop not in text[:7]
    doc = chat(client, logprobs=True, stop=[stop])
    choice = doc["choices"][0]
    assert choice["message"]["content"] == text[:6]
    assert [e["token"] for e in choice["logprobs"]["content"]] == list(text[:6])
    chunks = streamed_entries(
        client, "/v1/chat/completions", {**CHAT, "logprobs": True, "stop": stop}
    )
    streamed = [e for c in chunks if c["logprobs"] for e in c["logprobs"]["content"]]
    assert streamed == choice["logprobs"]["content"]


def test_text_held_back_and_then_returned_brings_its_tokens(client: TestClient) -> None:
    text = chat(client)["choices"][0]["message"]["content"]
    held = text[3] + "0"  # "0" is never generated: text[3] is held back, then returned
    doc = chat(client, logprobs=True, stop=[held])
    content = doc["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == doc["choices"][0]["message"]["content"] == text
    chunks = streamed_entries(
        client, "/v1/chat/completions", {**CHAT, "logprobs": True, "stop": held}
    )
    carried = [c for c in chunks if c["delta"].get("content")]
    assert any(len(c["logprobs"]["content"]) == 2 for c in carried)  # the held one, and the next
    assert [e for c in carried for e in c["logprobs"]["content"]] == content


COMPLETION = {"prompt": "abcabc", "max_tokens": 12, "temperature": 0}


def test_text_completions_have_the_legacy_lists(client: TestClient) -> None:
    res = client.post("/v1/completions", json={**COMPLETION, "logprobs": 2})
    assert res.status_code == 200, res.text
    choice = res.json()["choices"][0]
    block = choice["logprobs"]
    assert "".join(block["tokens"]) == choice["text"] and len(block["tokens"]) == 12
    prompt = list(spec_of(client).prompt_tokens(COMPLETION["prompt"], raw=True))
    tokens = [ord(t) - ord("a") for t in block["tokens"]]
    want = expected(client, prompt, tokens, 2)
    assert block["token_logprobs"] == pytest.approx([w[0] for w in want], abs=1e-6)
    for tok, top, (logp, best, best_logp) in zip(tokens, block["top_logprobs"], want, strict=True):
        # the two likeliest and the token itself, as OpenAI gives them
        assert set(top) == {chr(ord("a") + t) for t in [*best, tok]}
        assert top[chr(ord("a") + tok)] == pytest.approx(logp, abs=1e-6)
        assert [top[chr(ord("a") + t)] for t in best] == pytest.approx(best_logp, abs=1e-6)
    # offsets from the start of the prompt, as OpenAI counts them
    assert block["text_offset"] == list(range(6, 18))
    chunks = streamed_entries(client, "/v1/completions", {**COMPLETION, "logprobs": 2})
    lists = [c["logprobs"] for c in chunks if c["text"]]
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert [x for one in lists for x in one[key]] == block[key]


def test_split_characters_get_their_bytes_and_offsets() -> None:
    model = FakeModel()  # tokens 6 and 7 are the two halves of "é"
    events = [
        TokenEvent(token=t, text=x, from_draft=False, logprob=-0.5, top_logprobs=((0, -0.1),))
        for t, x in [(0, "a"), (6, ""), (7, "é"), (1, "b")]
    ]
    legacy = Logprobs(model, chat=False, offset=3)
    returned = [e for ev in events for e in legacy.feed(ev)]
    block = legacy.block(returned)
    assert block["text_offset"] == [3, 4, 4, 5]
    assert block["tokens"][1:3] == ["\ufffd", "\ufffd"]
    chat_block = Logprobs(model, chat=True).block(returned)
    assert [e["bytes"] for e in chat_block["content"]] == [[97], [0xC3], [0xA9], [98]]


@pytest.mark.parametrize(
    ("path", "fields", "param", "code"),
    [
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "integer_above_max_value"),
        ("chat", {"logprobs": True, "top_logprobs": -1}, "top_logprobs", "integer_below_min_value"),
        ("chat", {"top_logprobs": 2}, "top_logprobs", "invalid_value"),
        ("chat", {"logprobs": False, "top_logprobs": 2}, "top_logprobs", "invalid_value"),
        ("chat", {"logprobs": 3}, "logprobs", "invalid_value"),
        ("chat", {"logprobs": True, "n": 2}, "n", "unsupported_parameter"),
        ("text", {"logprobs": 6}, "logprobs", "integer_above_max_value"),
        ("text", {"logprobs": -1}, "logprobs", "integer_below_min_value"),
        ("text", {"logprobs": True}, "logprobs", "invalid_value"),
        ("text", {"logprobs": 2, "top_logprobs": 2}, "top_logprobs", "invalid_value"),
        ("text", {"logprobs": 2, "n": 3}, "n", "unsupported_parameter"),
    ],
)
def test_bad_logprobs_get_a_400_naming_the_field(
    client: TestClient, path: str, fields: dict[str, Any], param: str, code: str
) -> None:
    url, doc = ("/v1/chat/completions", CHAT) if path == "chat" else ("/v1/completions", COMPLETION)
    for stream in (False, True):  # a stream is refused before it starts
        res = client.post(url, json={**doc, **fields, "stream": stream})
        assert res.status_code == 400, res.text
        error = res.json()["error"]
        assert (error["param"], error["code"]) == (param, code)
        assert error["type"] == "invalid_request_error"


def test_logprobs_with_tools_are_refused(client: TestClient) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    res = client.post("/v1/chat/completions", json={**CHAT, "logprobs": True, "tools": [tool]})
    assert res.status_code == 400 and res.json()["error"]["param"] == "logprobs"


def test_the_openai_sdk_reads_them_streamed_and_not(client: TestClient) -> None:
    from openai import OpenAI

    sdk = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="unused", http_client=client)
    asked: dict[str, Any] = dict(
        model="edgespec", messages=CHAT["messages"], temperature=0, max_tokens=24
    )
    whole = sdk.chat.completions.create(**asked, logprobs=True, top_logprobs=5)
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 24
    assert "".join(e.token for e in content) == whole.choices[0].message.content
    assert all(len(e.top_logprobs) == 5 for e in content)
    assert all(
        np.isclose(e.top_logprobs[0].logprob, max(e.logprob, e.top_logprobs[0].logprob))
        for e in content
    )
    stream = sdk.chat.completions.create(**asked, logprobs=True, top_logprobs=5, stream=True)
    streamed = [
        e
        for c in stream
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content or []
    ]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    legacy = sdk.completions.create(model="edgespec", prompt="abcabc", max_tokens=8, logprobs=3)
    block = legacy.choices[0].logprobs
    assert block is not None and block.tokens is not None and len(block.tokens) == 8
    assert block.text_offset is not None and block.text_offset[0] == 6
