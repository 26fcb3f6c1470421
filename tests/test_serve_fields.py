"""What real clients send `edgespec serve` beyond the fields it reads (llm, aider through
litellm, the openai SDK): read, ignored, or refused with OpenAI's error body, never a wrong
answer that looks right. Over fake models in-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.test_serve import CHAT, fake_app, sse

USER = CHAT["messages"]


@pytest.fixture
def client() -> Iterator[TestClient]:
    with fake_app() as c:
        yield c


def answer(client: TestClient, **fields: Any) -> str:
    res = client.post("/v1/chat/completions", json={**CHAT, **fields})
    assert res.status_code == 200, res.text
    return str(res.json()["choices"][0]["message"]["content"])


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"functions": [TOOL["function"]]}, "functions"),
        ({"response_format": {"type": "grammar"}}, "response_format"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -0.5}, "frequency_penalty"),
        ({"n": 2}, "n"),
    ],
)
def test_what_the_server_cannot_do_is_refused_as_openai_refuses_it(
    client: TestClient, fields: dict[str, Any], param: str
) -> None:
    for stream in (False, True):  # a stream is refused before it starts
        res = client.post("/v1/chat/completions", json={**CHAT, **fields, "stream": stream})
        assert res.status_code == 400, res.text
        error = res.json()["error"]
        assert error["param"] == param and error["code"] == "unsupported_parameter"
        assert error["type"] == "invalid_request_error" and "not supported" in error["message"]


@pytest.mark.parametrize(
    ("fields", "param"), [({"echo": True}, "echo"), ({"best_of": 3}, "best_of")]
)
def test_text_completions_refuse_echo_and_best_of_rather_than_ignore_them(
    client: TestClient, fields: dict[str, Any], param: str
) -> None:
    # Issue 63: both were accepted and ignored (the answer looked right and was not).
    ask = {"prompt": "abc", "max_tokens": 3, "temperature": 0}
    for stream in (False, True):
        res = client.post("/v1/completions", json={**ask, **fields, "stream": stream})
        assert res.status_code == 400, res.text
        error = res.json()["error"]
        assert error["param"] == param and error["code"] == "unsupported_parameter"
    # Their defaults ask for nothing: accepted.
    plain = client.post("/v1/completions", json=ask).json()["choices"][0]["text"]
    same = client.post("/v1/completions", json={**ask, "echo": False, "best_of": 1})
    assert same.status_code == 200 and same.json()["choices"][0]["text"] == plain


def test_fields_that_change_nothing_are_accepted(client: TestClient) -> None:
    plain = answer(client)
    harmless = {
        "tools": [],
        "response_format": {"type": "text"},
        "logprobs": False,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "stream_options": {"include_usage": True, "include_obfuscation": False},
        "store": False,
        "metadata": {"from": "a test"},
        "parallel_tool_calls": False,
        "service_tier": "auto",
        "a_field_no_one_has_heard_of": [1, 2],
    }
    assert answer(client, **harmless) == plain


def test_null_means_the_default(client: TestClient) -> None:
    # litellm and others send `null` for what they leave unset, as OpenAI accepts.
    nulls = {"top_p": None, "stop": None, "seed": None, "n": None, "user": None}
    assert answer(client, **nulls) == answer(client)
    res = client.post(
        "/v1/chat/completions", json={**CHAT, "temperature": None, "max_tokens": None}
    )
    assert res.status_code == 200, res.text
    assert res.json()["usage"]["completion_tokens"] > 0


def test_a_developer_turn_is_a_system_turn(client: TestClient) -> None:
    said = "Answer in one word."
    system = answer(client, messages=[{"role": "system", "content": said}, *USER])
    developer = answer(client, messages=[{"role": "developer", "content": said}, *USER])
    assert developer == system


def test_text_parts_are_read_and_other_parts_refused(client: TestClient) -> None:
    text = USER[0]["content"]
    parts = [{"type": "text", "text": text[:4]}, {"type": "text", "text": text[4:]}]
    assert answer(client, messages=[{"role": "user", "content": parts}]) == answer(client)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    res = client.post(
        "/v1/chat/completions",
        json={**CHAT, "messages": [{"role": "user", "content": [parts[0], image]}]},
    )
    assert res.status_code == 400
    error = res.json()["error"]
    assert error["param"] == "messages.0.content" and "image_url" in error["message"]
    tool_turn = {"role": "tool", "content": "42", "tool_call_id": "c1"}
    assert answer(client, messages=[*USER, tool_turn])
    silent = {"role": "assistant", "content": None}  # content is optional only beside tool calls
    res = client.post("/v1/chat/completions", json={**CHAT, "messages": [*USER, silent]})
    assert res.status_code == 400 and res.json()["error"]["param"] == "messages.1"


def test_the_request_id_header_names_the_answer(client: TestClient) -> None:
    # The openai SDK reads it as `_request_id`; a log line and a client can then agree.
    whole = client.post("/v1/chat/completions", json=CHAT)
    assert whole.headers["x-request-id"] == whole.json()["id"]
    stream = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 3, "stream": True})
    ids = {chunk["id"] for chunk in sse(stream.text)}
    assert ids == {stream.headers["x-request-id"]}
    assert stream.headers["content-type"].startswith("text/event-stream")
