"""Predicted outputs over the server: `prediction` on chat completions, through the openai SDK
against fake models in-process, with the two usage counters; bad predictions get a 400
naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
from tests.fakes import FakeTextModel
from tests.test_serve import NAMES, live

MESSAGES: list[Any] = [{"role": "user", "content": "abcabcabc"}]


def _app() -> object:
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    return create_app(spec, model_names=NAMES)


def test_the_openai_sdk_sends_a_prediction_and_reads_the_counters() -> None:
    from openai import OpenAI

    with live(_app()) as port:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        ask = {"model": "edgespec", "messages": MESSAGES, "max_tokens": 40, "temperature": 0}
        plain = client.chat.completions.create(**ask, extra_body={"edgespec": {"drafter": "none"}})
        text = plain.choices[0].message.content
        assert text and plain.usage is not None
        details = plain.usage.completion_tokens_details
        assert details is not None and details.accepted_prediction_tokens == 0
        # The answer itself as the prediction, as text parts: drafted from, nothing rejected.
        parts = [{"type": "text", "text": text[:20]}, {"type": "text", "text": text[20:]}]
        got = client.chat.completions.create(
            **ask, prediction={"type": "content", "content": parts}
        )
        assert got.choices[0].message.content == text
        assert got.usage is not None and got.usage.completion_tokens_details is not None
        accepted = got.usage.completion_tokens_details.accepted_prediction_tokens
        assert accepted and accepted > 20
        assert got.usage.completion_tokens_details.rejected_prediction_tokens == 0
        # Streamed: the counters in the usage chunk the client asked for.
        stream = client.chat.completions.create(
            **ask,
            prediction={"type": "content", "content": text},
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == text
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens_details is not None
        # (auto drafts from the earlier answers too now: the counts differ from the above)
        assert usage.completion_tokens_details.accepted_prediction_tokens
        assert usage.completion_tokens_details.rejected_prediction_tokens == 0


@pytest.mark.parametrize(
    "prediction",
    [
        "just text",
        {"type": "text", "content": "x"},
        {"type": "content"},
        {"type": "content", "content": 3},
        {"type": "content", "content": [{"type": "image_url", "image_url": "x"}]},
        {"type": "content", "content": "x", "extra": 1},
        {"type": "content", "content": "a" * 300},  # larger than the context of 256
    ],
)
def test_a_bad_prediction_gets_a_400_naming_it(prediction: object) -> None:
    from starlette.testclient import TestClient

    with TestClient(_app(), base_url="http://127.0.0.1:8080") as client:  # type: ignore[arg-type]
        res = client.post(
            "/v1/chat/completions",
            json={"messages": MESSAGES, "max_tokens": 4, "prediction": prediction},
        )
    assert res.status_code == 400
    error = res.json()["error"]
    assert error["param"] == "prediction" and error["type"] == "invalid_request_error"
