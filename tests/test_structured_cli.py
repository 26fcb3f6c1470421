"""Structured output from the command line: `edgespec run --json-schema/--grammar/--json-object`
writes text valid against what was asked, the same with drafts as without; an answer cut
inside its object, and a schema that cannot be used, are one line on stderr and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from edgespec.api import Speculator
from edgespec.cli import loading
from tests.conftest import edgespec, edgespec_here
from tests.grammars import GrammarChatModel

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
EXTRACT = "Extract the person: Ann Lee is 34 years old and lives in Oslo."
FAST = ("--max-tokens", "48", "--ctx-size", "1024", "--offline")


@pytest.mark.real
def test_json_schema_output_is_valid_and_the_same_with_drafts_as_without(
    env: dict[str, str], tmp_path: Path
) -> None:
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    answers = {}
    for drafter in ("auto", "none"):
        res = edgespec("run", EXTRACT, "--json-schema", str(schema), "-d", drafter, *FAST, env=env)
        assert res.returncode == 0, res.stderr
        answers[drafter] = res.stdout
    doc = json.loads(answers["auto"])
    jsonschema.validate(doc, PERSON)
    assert doc["age"] == 34 and "\n" not in answers["auto"].strip()  # JSON on one line
    assert answers["auto"] == answers["none"]


@pytest.mark.real
def test_a_gbnf_grammar_and_any_json_object(env: dict[str, str], tmp_path: Path) -> None:
    grammar = tmp_path / "answer.gbnf"
    grammar.write_text('root ::= verdict "."\nverdict ::= "yes" | "no"\n')
    res = edgespec("run", "Is Paris in France?", "--grammar", str(grammar), *FAST, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout in ("yes.", "no.")
    asked = "Give the point x=1, y=2 as JSON."
    res = edgespec("run", asked, "--json-object", "-d", "ngram", *FAST, env=env)
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout), dict)


@pytest.mark.real
def test_max_tokens_running_out_inside_the_object_is_one_line_and_exit_1(
    env: dict[str, str],
) -> None:
    res = edgespec(
        "run", EXTRACT, "--json-schema", json.dumps(PERSON), *FAST, "--max-tokens", "5", env=env
    )
    assert res.returncode == 1
    assert res.stdout.startswith('{"name": ')  # what was written stays written
    assert res.stderr.strip().splitlines() == [
        "edgespec: error: the output is incomplete: --max-tokens (5) ran out inside it"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--json-schema", '{"type": "string", "format": "weird"}'), "Unknown format: weird"),
        (("--json-schema", "{not json"), "the JSON schema is not valid JSON"),
        (("--json-schema", "/nonexistent/schema.json"), "/nonexistent/schema.json: cannot be read"),
        (("--grammar", "/nonexistent/g.gbnf"), "--grammar /nonexistent/g.gbnf: cannot be read"),
        (("--json-schema", "{}", "--grammar", "g.gbnf"), "exclude each other"),
        (("--json-object", "--json-schema", "{}"), "exclude each other"),
    ],
)
def test_an_unusable_schema_is_one_line_before_anything_loads(
    isolated: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    res = edgespec_here("run", "hi", *args, env=isolated)
    assert res.returncode == 1 and res.stdout == ""
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith("edgespec: error: ")
    # Refused before anything was fetched or loaded: the isolated home was never written.
    assert not Path(isolated["EDGESPEC_HOME"]).exists()
    assert not Path(isolated["HF_HOME"]).exists()


def test_run_holds_the_answer_to_its_grammar_on_a_fake_model(
    isolated: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        loading, "load", lambda options, drafting: Speculator(GrammarChatModel(seed=5), None)
    )
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
              "additionalProperties": False}  # fmt: skip
    asked = ("run", "ab", "--json-schema", json.dumps(schema), "-d", "ngram")
    res = edgespec_here(*asked, env=isolated)
    assert res.returncode == 0, res.stderr
    jsonschema.validate(json.loads(res.stdout), schema)
    res = edgespec_here(*asked, "--max-tokens", "2", env=isolated)
    assert res.returncode == 1 and res.stdout.startswith("{")
    assert res.stderr.strip().splitlines() == [
        "edgespec: error: the output is incomplete: --max-tokens (2) ran out inside it"
    ]
