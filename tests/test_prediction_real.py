"""Predicted outputs on the real pair, through the openai SDK against `edgespec serve`: the
answer is plain decoding's, and the usage counters are the draft log's."""

from __future__ import annotations

import pytest

from tests.conftest import RealPair
from tests.test_serve import serving
from tests.test_serve_clients import SHAPES

pytestmark = pytest.mark.real


def test_the_openai_sdk_applies_an_edit_with_the_file_as_prediction(real_pair: RealPair) -> None:
    from openai import OpenAI

    ask = "Rename the function area to rectangle_area. Return the whole file, code only.\n\n"
    messages = [{"role": "user", "content": f"{ask}```python\n{SHAPES}```"}]
    with serving(real_pair) as server:
        client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        common = {"model": "edgespec", "messages": messages, "max_tokens": 80, "temperature": 0}
        plain = client.chat.completions.create(
            **common, extra_body={"edgespec": {"drafter": "none"}}
        )
        # A fixed K drafts the prediction first where it has a draft; `auto` takes its own copy
        # of the file in the prompt on a tie (the same tokens, with the edits it learned), so
        # how many come from the prediction there follows the round times it learns.
        predicted = client.chat.completions.create(
            **common,
            prediction={"type": "content", "content": SHAPES},
            extra_body={"edgespec": {"drafter": "ngram"}},
        )
    assert predicted.choices[0].message.content == plain.choices[0].message.content
    assert predicted.usage is not None and predicted.usage.completion_tokens_details is not None
    details = predicted.usage.completion_tokens_details
    # Most of the 80 tokens are the file's (32 accepted, 8 rejected on the 2-core EPYC).
    assert details.accepted_prediction_tokens and details.accepted_prediction_tokens >= 16
    # The edgespec block is the draft log's sum over the rounds drafted from the prediction.
    log = (predicted.model_extra or {})["edgespec"]["drafters"]["prediction"]
    assert details.accepted_prediction_tokens == log["accepted"]
    assert details.rejected_prediction_tokens == log["drafted"] - log["accepted"]
