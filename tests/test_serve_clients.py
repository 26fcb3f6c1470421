"""`edgespec serve` driven by the clients people point at a local server, end to end on the
real pair: Simon Willison's `llm`, `aider` (in a virtual environment of its own: it pins many
packages) and the openai SDK (a stream given up midway, the headers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.client_envs import client_environment
from tests.conftest import RealPair
from tests.test_serve import Server, serving

pytestmark = pytest.mark.real

# aider pins its dependencies (litellm, openai, ...) tightly: its own environment, built once
# and kept between runs; the version is fixed so that what it sends stays what was tested.
AIDER = "aider-chat==0.86.2"


@pytest.fixture(scope="module")
def server(real_pair: RealPair) -> Iterator[Server]:
    with serving(real_pair, "--metrics") as running:
        yield running


def counter(server: Server, name: str) -> float:
    """A counter's total over all its labels, from /metrics."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as res:
        families = text_string_to_metric_families(res.read().decode())
        return sum(s.value for f in families for s in f.samples if s.name == name)


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd[:3]}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_llm_streams_a_prompt_and_continues_the_chat(server: Server, tmp_path: Path) -> None:
    # llm's own way to a local OpenAI-compatible server, in a user folder of its own.
    (tmp_path / "extra-openai-models.yaml").write_text(
        f"- model_id: edgespec\n  model_name: edgespec\n  api_base: {server.url}/v1\n"
    )
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path)}
    llm = [str(Path(sys.executable).with_name("llm"))]
    options = ["-o", "temperature", "0", "-o", "max_tokens", "24"]
    first = run(
        [*llm, "-m", "edgespec", "My name is Zorblax. Reply with OK.", *options], env, tmp_path
    )
    assert first.strip()
    later = run([*llm, "-c", "What is my name? One word.", *options], env, tmp_path)
    assert "Zorblax" in later  # only the first prompt said it: the chat was continued
    logged = json.loads(run([*llm, "logs", "-n", "2", "--json"], env, tmp_path))
    assert len({entry["conversation_id"] for entry in logged}) == 1
    assert all(e["response_json"]["object"] == "chat.completion.chunk" for e in logged)  # streamed


def aider_environment() -> Path:
    return client_environment("aider", AIDER) / "bin" / "aider"


SHAPES = '''def area(width, height):
    """The area of a rectangle."""
    return width * height


def describe(width, height):
    return f"{width} x {height} has area {area(width, height)}"
'''


def test_aider_renames_a_function_in_a_file(server: Server, tmp_path: Path) -> None:
    aider = aider_environment()
    source = tmp_path / "shapes.py"
    source.write_text(SHAPES)
    accepted = counter(server, "edgespec_tokens_accepted_total")
    env = {
        **os.environ,
        "HOME": str(tmp_path),  # aider's settings, history and analytics stay in here
        "OPENAI_API_KEY": "unused",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no model list from the internet
    }
    cmd = [str(aider), "--model", "openai/edgespec", "--openai-api-base", server.url + "/v1"]
    cmd += ["--no-git", "--edit-format", "whole", "--yes-always", "--no-check-update"]
    cmd += ["--analytics-disable", "--no-show-model-warnings", "--no-auto-lint", "--no-pretty"]
    cmd += ["--message", "Rename the function area to rectangle_area everywhere in shapes.py."]
    run([*cmd, "shapes.py"], env, tmp_path)
    edited = source.read_text()
    assert "def rectangle_area(width, height):" in edited and "def area(" not in edited
    assert "{rectangle_area(width, height)}" in edited
    compile(edited, "shapes.py", "exec")
    # The answer copies most of the file: the drafts that the speculation made were accepted.
    assert counter(server, "edgespec_tokens_accepted_total") > accepted


def test_the_openai_sdk_gives_up_a_stream_and_the_generation_stops(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    ask = {"model": "edgespec", "temperature": 0, "extra_body": {"edgespec": {"drafter": "none"}}}
    story = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
    before = counter(server, "edgespec_tokens_generated_total")
    stream = client.chat.completions.create(messages=story, max_tokens=400, stream=True, **ask)
    read = 0
    for chunk in stream:
        read += bool(chunk.choices and chunk.choices[0].delta.content)
        if read == 8:
            break
    stream.close()  # the SDK's way to give up: the connection closes
    # Served after the given-up generation has stopped (one request at a time), so /metrics
    # then counts all of its tokens.
    one = client.chat.completions.create(messages=story, max_tokens=1, **ask)
    assert one.usage is not None and one.usage.completion_tokens == 1
    generated = counter(server, "edgespec_tokens_generated_total") - before - 1
    # Plain decoding makes one token a round: the server stopped within a few rounds of the
    # client leaving (the buffer between them holds what was made meanwhile), far from 400.
    assert read <= generated < read + 100, generated


def test_the_openai_sdk_reads_the_headers_it_expects(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    ask = {"model": "edgespec", "temperature": 0, "max_tokens": 4}
    hello = [{"role": "user", "content": "Say hello."}]
    raw = client.chat.completions.with_raw_response.create(messages=hello, **ask)
    assert raw.status_code == 200 and raw.headers["content-type"] == "application/json"
    answer = raw.parse()
    assert raw.headers["x-request-id"] == answer.id == answer._request_id
    assert answer.choices[0].message.content
    raw_stream = client.chat.completions.with_raw_response.create(
        messages=hello, stream=True, **ask
    )
    assert raw_stream.headers["content-type"].startswith("text/event-stream")
    chunks = list(raw_stream.parse())
    assert {c.id for c in chunks} == {raw_stream.headers["x-request-id"]}
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == answer.choices[0].message.content
