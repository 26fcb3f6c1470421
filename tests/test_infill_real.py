"""Fill-in-the-middle on the real Qwen2.5-Coder pair: its FIM tokens, a greedy middle that ends
before the suffix's code, the same with and without speculation, and the server driven by the
openai SDK (`completions.create(suffix=...)`) and by llama.vim's /infill request."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator

import pytest

from edgespec.bench.runner import near_tie
from edgespec.engine.events import TokenEvent
from tests.conftest import RealPair, edgespec
from tests.test_infill import LLAMA_VIM
from tests.test_serve import Server, serving

pytestmark = pytest.mark.real

PREFIX = 'import os\n\n\ndef list_py(folder):\n    """Python files in folder."""\n    out = []\n'
SUFFIX = "    return out\n"


def test_the_coder_model_declares_its_fim_tokens(loaded) -> None:  # type: ignore[no-untyped-def]
    ids = loaded.target.fim_tokens
    names = {n: loaded.target._piece(t, special=True) for n, t in ids.items()}
    assert names == {
        "pre": b"<|fim_prefix|>", "suf": b"<|fim_suffix|>", "mid": b"<|fim_middle|>",
        "pad": b"<|fim_pad|>", "rep": b"<|repo_name|>", "sep": b"<|file_sep|>",
    }  # fmt: skip


def test_a_greedy_middle_ends_before_the_suffix_and_auto_writes_it_too(loaded) -> None:  # type: ignore[no-untyped-def]
    plain = loaded.infill(PREFIX, SUFFIX, max_tokens=48, drafter="none")
    assert "out.append" in plain and "return out" not in plain, plain
    assert plain.endswith("\n")  # the cursor is at a line's start: the suffix follows a newline
    prompt = loaded.infill_prompt(PREFIX, SUFFIX, max_tokens=48)
    tokens = {
        drafter: [
            e.token
            for e in loaded.stream_infill(prompt, drafter=drafter, max_tokens=48)
            if isinstance(e, TokenEvent)
        ]
        for drafter in ("none", "auto")
    }
    # The same tokens, or a first difference where the target's top two logits nearly tie
    # (llama.cpp's batched and one-token kernels differ slightly: tests/test_real_pair.py).
    plain_tokens, auto_tokens = tokens["none"], tokens["auto"]
    if auto_tokens != plain_tokens:
        pairs = zip(auto_tokens, plain_tokens, strict=False)
        i = next(j for j, (a, b) in enumerate(pairs) if a != b)
        loaded.reset()
        logits = loaded.target.decode(prompt.tokens + plain_tokens[:i], 1)[0]
        loaded.reset()
        assert near_tie(logits, auto_tokens[i], plain_tokens[i])[1], i


def test_the_infill_command_completes_a_file_from_stdin_at_a_line(env: dict[str, str]) -> None:
    source = PREFIX + SUFFIX + "\n\nprint(list_py('.'))\n"
    line = PREFIX.count("\n") + 1  # the suffix's first line: the cursor at its start
    res = edgespec(
        "infill", "-", "--line", str(line), "--column", "1", "--drafter", "none",
        "-n", "48", "--ctx-size", "2048", "--stats", input=source, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "out.append" in res.stdout and "return out" not in res.stdout, res.stdout
    assert "tok/s" in res.stderr and "tok/s" not in res.stdout


@pytest.fixture(scope="module")
def server(real_pair: RealPair) -> Iterator[Server]:
    with serving(real_pair) as running:
        yield running


def test_the_openai_sdk_fills_the_middle_with_suffix(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="none")
    done = client.completions.create(
        model="edgespec", prompt=PREFIX, suffix=SUFFIX, max_tokens=48, temperature=0
    )
    text = done.choices[0].text
    assert "out.append" in text and "return out" not in text, text
    assert done.choices[0].finish_reason == "stop"


def test_llama_vim_s_infill_request_gets_what_it_reads(server: Server) -> None:
    ask = {**LLAMA_VIM, "input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "",
           "n_predict": 48, "n_indent": 0, "t_max_predict_ms": 60_000}  # fmt: skip
    request = urllib.request.Request(
        server.url + "/infill", json.dumps(ask).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as res:
        raw = res.read().decode()
    assert re.search(r'"content"\s*:"', raw)  # llama.vim's check before it decodes
    doc = json.loads(raw)
    assert "append" in doc["content"] and "return out" not in doc["content"], doc
    assert doc["timings/predicted_n"] > 0 and doc["truncated"] is False
