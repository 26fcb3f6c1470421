"""Structured output through `edgespec serve` on the real pair, as clients ask for it: the
openai SDK's `parse` with a pydantic model, `instructor` extracting a model (in a virtual
environment of its own), a tool-calling round trip; and hostile schemas served or refused
within bounded time and memory."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests.client_envs import client_environment
from tests.conftest import ROOT, RealPair
from tests.hostile_schemas import SCHEMAS
from tests.test_serve import Server, serving

pytestmark = pytest.mark.real

# instructor pins its own openai and more: its own environment, built once and kept; the
# version is fixed so that what it sends stays what was tested.
INSTRUCTOR = "instructor==1.17.0"
ASK = {"model": "edgespec", "temperature": 0, "max_tokens": 120}
INVOICE = "Invoice INV-0042 from Acme: total 128.50 EUR, not paid yet. Extract the invoice."


class Invoice(BaseModel):
    number: str
    total: float
    paid: bool


@pytest.fixture(scope="module")
def server(real_pair: RealPair) -> Iterator[Server]:
    with serving(real_pair) as running:
        yield running


def test_the_openai_sdk_parses_a_pydantic_model(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": INVOICE}]
    answer = client.chat.completions.parse(messages=messages, response_format=Invoice, **ASK)  # type: ignore[arg-type]
    invoice = answer.choices[0].message.parsed
    assert isinstance(invoice, Invoice) and answer.choices[0].finish_reason == "stop"
    assert invoice.number == "INV-0042" and invoice.total == 128.5 and invoice.paid is False


def instructor_environment() -> Path:
    return client_environment("instructor", INSTRUCTOR) / "bin" / "python"


EXTRACT = """
import sys, instructor
from openai import OpenAI
from pydantic import BaseModel

class Invoice(BaseModel):
    number: str
    total: float
    paid: bool

client = instructor.from_openai(
    OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0),
    mode=getattr(instructor.Mode, sys.argv[2]),
)
invoice = client.chat.completions.create(
    model="edgespec", response_model=Invoice, max_retries=0, temperature=0, max_tokens=120,
    messages=[{"role": "user", "content": sys.argv[3]}],
)
print(invoice.model_dump_json())
"""


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])  # a named tool call; response_format
def test_instructor_extracts_a_model_from_text(server: Server, mode: str) -> None:
    python = instructor_environment()
    cmd = [str(python), "-c", EXTRACT, server.url + "/v1", mode, INVOICE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    invoice = Invoice.model_validate_json(proc.stdout)
    assert invoice.number == "INV-0042" and invoice.total == 128.5 and invoice.paid is False


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_a_tool_call_round_trip(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    messages: list = [{"role": "user", "content": "What is the weather in Paris right now?"}]  # type: ignore[type-arg]
    first = client.chat.completions.create(
        messages=messages, tools=[WEATHER], tool_choice="required", **ASK
    )  # type: ignore[call-overload]
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert "Paris" in json.loads(call.function.arguments)["city"]
    # Streamed, the same call arrives in OpenAI's fragments.
    stream = client.chat.completions.create(
        messages=messages, tools=[WEATHER], tool_choice="required", stream=True, **ASK
    )  # type: ignore[call-overload]
    names, arguments = [], ""
    for chunk in stream:
        for part in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            names += [part.function.name] if part.function.name else []
            arguments += part.function.arguments or ""
    assert names[:1] == ["get_weather"] and arguments == call.function.arguments
    messages.append(choice.message.model_dump(exclude_none=True))
    result = {"temperature_c": 24, "sky": "sunny"}
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    # "none": the answer in words (the default pair's small target, shown the tools again,
    # writes the call out as text rather than answering).
    final = client.chat.completions.create(
        messages=messages, tools=[WEATHER], tool_choice="none", **ASK
    )  # type: ignore[call-overload]
    answer = final.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "24" in (answer.message.content or "")


# Far above what the model, its vocabulary and a schema's grammar need (about 1.5 GB), far
# below what a runaway grammar would take.
MEMORY_CAP = 6 << 30
WALL_CLOCK_S = 300


def test_hostile_schemas_are_served_or_refused_in_bounded_time_and_memory(
    real_pair: RealPair,
) -> None:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    cmd = [sys.executable, "-m", "tests.hostile_schemas", str(real_pair.draft)]  # same vocabulary
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=WALL_CLOCK_S, preexec_fn=cap
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {(r["schema"], r["tool"]) for r in results} == {
        (name, tool) for name in SCHEMAS for tool in (False, True)
    }
    for r in results:
        assert r["outcome"] in ("served", "refused"), r
        assert r["outcome"] == "served" or r["message"], r
    outcome = {r["schema"]: r["outcome"] for r in results if not r["tool"]}
    assert outcome["a recursive $ref (a linked list)"] == "served"  # recursion itself is fine
    assert outcome["an unknown format"] == "refused"
