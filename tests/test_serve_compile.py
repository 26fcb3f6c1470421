"""Issue 50, defect 2: a request's grammar is compiled once, after the queue check, outside the
worker's turn and under a deadline; over a fake model that spells text through the real
grammar engine, served by uvicorn on loopback."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import llguidance
import pytest
from fastapi import FastAPI

import edgespec.text.grammar
from edgespec.api import Speculator
from edgespec.server.app import create_app
from edgespec.server.compiling import Compiler
from edgespec.text.grammar import Grammar, GrammarConstraint
from tests.grammars import ChatGrammarModel
from tests.test_serve import live

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {"type": "object", "properties": {"unit": {"enum": ["C", "F"]}}, "required": ["unit"]}
PLAIN = {"drafter": "none"}
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}


def make_app() -> FastAPI:
    return create_app(Speculator(ChatGrammarModel(seed=3, n_ctx=4096), None), model_names=["f"])


def post(port: int, **fields: Any) -> tuple[int, dict[str, Any]]:
    """Status and body of one chat request."""
    doc = {"messages": USER, "max_tokens": 8, "temperature": 0, "edgespec": PLAIN, **fields}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json.dumps(doc).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as res:
            status, body = res.status, res.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    try:
        return status, json.loads(body)
    except ValueError:  # a stream's events
        return status, {"raw": body.decode()}


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every grammar compile llguidance does (a matcher built, a grammar validated)."""
    seen: list[str] = []
    real = llguidance.LLMatcher

    class Counting:
        grammar_from_json_schema = staticmethod(real.grammar_from_json_schema)
        grammar_from_lark = staticmethod(real.grammar_from_lark)

        def __new__(cls, *args: Any, **kw: Any) -> Any:
            seen.append("matcher")
            return real(*args, **kw)

        @staticmethod
        def validate_grammar_with_warnings(*args: Any, **kw: Any) -> Any:
            seen.append("validation")
            return real.validate_grammar_with_warnings(*args, **kw)

    fake = SimpleNamespace(LLMatcher=Counting, LLParserLimits=llguidance.LLParserLimits)
    monkeypatch.setattr(edgespec.text.grammar, "llguidance", fake)
    yield seen


@contextlib.contextmanager
def held_compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Every compile waits (GIL released, as a hostile schema's does) until the event is set;
    set on leaving, so that no compile thread outlives the test."""
    release = threading.Event()
    real = Grammar._compile

    def held(self: Grammar, tokenizer: Any) -> Any:
        release.wait()
        return real(self, tokenizer)

    monkeypatch.setattr(Grammar, "_compile", held)
    try:
        yield release
    finally:
        release.set()


def test_a_schema_is_compiled_once_per_request(compiles: list[str]) -> None:
    with live(make_app()) as port:
        status, body = post(port, response_format=SCHEMA_FORMAT, max_tokens=60)
    assert status == 200, body
    assert compiles == ["matcher"]
    assert json.loads(body["choices"][0]["message"]["content"])["unit"] in ("C", "F")


def tools(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": f"f{i}", "parameters": SCHEMA}} for i in range(n)
    ]


@pytest.mark.parametrize("n", [1, 5, 20])
def test_the_tools_grammar_is_compiled_once(compiles: list[str], n: int) -> None:
    # Issue 63: each tool's schema was compiled alone first, then all of them again (n + 1).
    with live(make_app()) as port:
        status, body = post(port, tools=tools(n), tool_choice="required", max_tokens=30)
    assert status == 200, body
    assert compiles == ["matcher"]


def test_the_tools_share_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tools' grammar times out; finding the tool at fault spends what is left of its
    # deadline, not a deadline of its own per tool.
    app = make_app()
    app.state.compiler.deadline_s = 0.3
    deadlines: list[float | None] = []
    real = Compiler.compile

    async def compile(
        self: Compiler, grammar: Grammar, tokenizer: Any, deadline: float | None = None
    ) -> GrammarConstraint:
        deadlines.append(deadline)
        return await real(self, grammar, tokenizer, deadline)

    monkeypatch.setattr(Compiler, "compile", compile)
    with live(app) as port, held_compiles(monkeypatch):
        status, body = post(port, tools=tools(10))
    assert status == 400, body
    assert body["error"]["param"] == "tools" and "within 0.3 s" in body["error"]["message"]
    assert len(deadlines) > 1 and None not in deadlines and len(set(deadlines)) == 1


def test_a_request_refused_for_a_full_queue_pays_no_compile(compiles: list[str]) -> None:
    app = make_app()
    app.state.worker.full = lambda client: True  # as when `--queue` requests wait already
    with live(app) as port:
        for stream in (False, True):
            status, body = post(port, response_format=SCHEMA_FORMAT, stream=stream)
            assert status == 429, body
    assert compiles == []


def test_a_slow_compile_does_not_hold_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compile does not end until the plain requests have been answered: had it held the
    # worker, they would wait for it (and time out), whatever the machine's speed.
    app = make_app()
    app.state.compiler.deadline_s = 600.0
    with live(app) as port, held_compiles(monkeypatch) as release:
        hostile: list[tuple[int, dict[str, Any]]] = []
        thread = threading.Thread(
            target=lambda: hostile.append(post(port, response_format=SCHEMA_FORMAT))
        )
        thread.start()
        for _ in range(5):  # plain requests while the compile is still running
            status, body = post(port)
            assert status == 200, body
        assert thread.is_alive() and not hostile
        release.set()
        thread.join()
    assert hostile[0][0] == 200, hostile


def test_a_compile_past_its_deadline_is_a_400_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = make_app()
    app.state.compiler.deadline_s = 0.3
    # The compile never ends while the requests wait: each answer came at the deadline.
    with live(app) as port, held_compiles(monkeypatch):
        for stream in (False, True):  # refused before a stream starts
            status, body = post(port, response_format=SCHEMA_FORMAT, stream=stream)
            assert status == 400, body
            assert body["error"]["param"] == "response_format.json_schema.schema"
            assert "did not compile within 0.3 s" in body["error"]["message"]


def test_a_schema_past_the_parsers_row_limit_is_refused_before_the_answer_starts() -> None:
    # Optional properties, each a branch where the object starts: past llguidance's 2,000
    # items in a row once its `{` is taken, though its first mask passes.
    many = {
        "type": "object",
        "properties": {f"property_{i}": {"type": "string"} for i in range(800)},
    }
    fmt = {"type": "json_schema", "json_schema": {"schema": many}}
    app = make_app()
    # The row limit is the point here, not the deadline: a loaded machine (the compile runs at
    # the lowest priority) must not turn it into a deadline refusal.
    app.state.compiler.deadline_s = 120.0
    with live(app) as port:
        status, body = post(port, response_format=fmt, stream=True)
    assert status == 400, body
    assert "row" in body["error"]["message"], body
