"""The `structured` suite and what bench reports for prompts with a schema: every answer
checked against it, the share drafted from the grammar, the time outside llama.cpp per token
with and without the grammar; on fake models through the real grammar engine."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from edgespec.api import Speculator
from edgespec.bench import measure, output, report
from edgespec.bench.configs import parse_configs
from edgespec.bench.measure import answer_valid
from edgespec.bench.runner import run_bench
from edgespec.bench.suites import BenchPrompt, load_suite
from edgespec.engine.events import DoneEvent, GenerationStats
from tests.grammars import ChatGrammarModel

# Two booleans: every answer is whole within a few tokens, whatever the fake model prefers.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "boolean"}, "ab": {"type": "boolean"}},
    "required": ["a", "ab"],
    "additionalProperties": False,
}


def test_the_structured_suite() -> None:
    prompts = load_suite("structured")
    assert len(prompts) >= 20
    assert all(p.schema is not None and p.grammar is not None for p in prompts)
    for p in prompts:
        jsonschema.Draft202012Validator.check_schema(p.schema)
    # Tool calls: one of several functions, its name fixed by the schema, its arguments too.
    calls = [p for p in prompts if "anyOf" in (p.schema or {})]
    assert len(calls) >= 5 and all(p.system for p in calls)
    names = {c["properties"]["name"]["const"] for p in calls for c in p.schema["anyOf"]}  # type: ignore[index]
    assert len(names) >= 8
    # The shapes vary: enums, nested objects, arrays, numbers, booleans, optional fields.
    text = "\n".join(json.dumps(p.schema) for p in prompts)
    for shape in ('"enum"', '"type": "array"', '"type": "number"', '"type": "boolean"'):
        assert shape in text
    assert any(set(p.schema["properties"]) - set(p.schema["required"]) for p in prompts
               if "properties" in (p.schema or {}))  # fmt: skip


def speculator() -> Speculator:
    target = ChatGrammarModel(seed=4, n_ctx=256)
    return Speculator(target, ChatGrammarModel(seed=4, n_ctx=256, noise=1.0, noise_seed=9))


def test_structured_prompts_are_generated_under_their_schema_and_reported() -> None:
    prompts = [BenchPrompt("json", i, f"answer {i}", schema=SCHEMA) for i in range(2)]
    configs = parse_configs("model:k=3")
    result = run_bench(speculator(), prompts, configs, repeats=2, max_tokens=40)
    assert result.complete and not result.failures  # greedy: as plain constrained decoding
    for p in result.prompts:
        runs = [m for label in ("none", "model:k=3") for m in p.runs[label]]
        assert all(m.valid for m in runs)
        # `{"a": ` is the grammar's, drafted where there is drafting (not in plain decoding)
        assert all(m.grammar_share > 0 for m in p.runs["model:k=3"])
        assert all(m.grammar_share == 0 for m in p.runs["none"])
        assert all(m.outside_ms_per_token is not None for m in runs)
        # once a repeat without the grammar, as long as the constrained answer
        assert len(p.free_runs) == 2 and all(m.valid is None for m in p.free_runs)
        assert p.free_runs[0].generated <= p.runs["none"][0].generated
    rows = report.structured_rows(result)
    assert [r[1] for r in rows] == ["none", "model:k=3", "none, no grammar"]
    assert rows[0][2] == "4/4" and rows[-1][2] == "-" and rows[-1][4] != "-"
    doc = output.document(result, {}, {"machine": "test"}, {})
    assert doc["validator"] == "jsonschema" and len(doc["structured"]) == 3
    assert len(doc["prompts"][0]["free_runs"]) == 2
    assert "Structured output (answers checked by jsonschema)" in output.markdown(result, {})


def test_prompts_without_a_schema_have_no_structured_rows() -> None:
    prompts = [BenchPrompt("plain", 0, "answer")]
    result = run_bench(speculator(), prompts, parse_configs("none"), repeats=1, max_tokens=8)
    assert not report.structured_rows(result) and not result.prompts[0].free_runs
    assert result.prompts[0].runs["none"][0].valid is None


@pytest.mark.parametrize(
    ("validator", "text", "incomplete", "valid"),
    [
        ("jsonschema", '{"a": true, "ab": false}', None, True),
        ("jsonschema", '{"a": 1, "ab": false}', None, False),  # against the schema
        ("grammar", '{"a": 1, "ab": false}', None, True),  # the grammar's word, JSON
        ("grammar", '{"a": tr', None, False),
        ("jsonschema", '{"a": true, "ab": false}', "cut inside", False),
    ],
)
def test_answers_are_checked_against_their_schema(
    monkeypatch: pytest.MonkeyPatch, validator: str, text: str, incomplete: str | None, valid: bool
) -> None:
    monkeypatch.setattr(measure, "VALIDATOR", validator)
    done = DoneEvent(finish_reason="stop", stats=GenerationStats(), incomplete=incomplete)
    assert answer_valid(text, SCHEMA, done) is valid
