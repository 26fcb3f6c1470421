"""The command line as people use it: text on stdout, the rest on stderr, pipes, JSON lines,
Ctrl-C and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgespec.cli import loading
from edgespec.cli.app import app
from tests.conftest import ROOT, edgespec, edgespec_here, interruptible
from tests.fakes import fake_plan

FAST = ("--max-tokens", "24", "--ctx-size", "1024")


@pytest.mark.real
def test_stdout_holds_only_the_text_and_stderr_the_stats(env: dict[str, str]) -> None:
    res = edgespec("run", "Write a Python one-liner that prints hello.", "--stats", *FAST, env=env)
    assert res.returncode == 0, res.stderr
    assert "print" in res.stdout
    assert "tok/s" not in res.stdout and "tok/s" in res.stderr
    assert "acceptance" in res.stderr or "drafter" in res.stderr


@pytest.mark.real
def test_a_bad_huge_pages_setting_is_one_clear_error(env: dict[str, str]) -> None:
    res = edgespec("run", "Say hi.", *FAST, env={**env, "EDGESPEC_HUGE_PAGES": "yes"})
    assert res.returncode == 1 and res.stdout == ""
    assert "EDGESPEC_HUGE_PAGES must be 0 or 1, not 'yes'" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.real
def test_json_lines(env: dict[str, str]) -> None:
    res = edgespec("run", "Say hi.", "--json", "--drafter", "ngram", *FAST, env=env)
    assert res.returncode == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert {d["type"] for d in docs} == {"token", "round", "done"}
    assert docs[-1]["type"] == "done" and docs[-1]["finish_reason"] in ("stop", "length")
    assert docs[-1]["stats"]["generated_tokens"] == sum(
        1 for d in docs if d["type"] == "token" and d["token"] != 151645
    )


@pytest.mark.real
def test_piped_input_joins_the_instruction(env: dict[str, str]) -> None:
    code = "def add(a, b):\n    return a + b\n"
    res = edgespec(
        "run",
        "Add type hints to this function. Reply with code only.",
        "--drafter",
        "ngram",
        *FAST,
        env=env,
        input=code,
    )
    assert res.returncode == 0, res.stderr
    assert "def add(a: " in res.stdout
    alone = edgespec(
        "run", "-", *FAST, env=env, input="What is 2 + 2? Answer with the number only."
    )
    assert alone.returncode == 0 and "4" in alone.stdout


@pytest.mark.real
def test_a_closed_pipe_ends_quietly(env: dict[str, str]) -> None:
    cmd = (
        f"{sys.executable} -m edgespec run 'Count from 1 to 40, one number per line.' "
        "--max-tokens 120 --ctx-size 1024 | head -n 2"
    )
    proc = subprocess.run(
        ["bash", "-c", cmd], capture_output=True, env=env, cwd=ROOT, timeout=300, check=False
    )
    assert proc.stdout.decode().splitlines()[:1] == ["1"]
    assert b"Traceback" not in proc.stderr and b"Error" not in proc.stderr, proc.stderr


@pytest.mark.real
def test_ctrl_c_keeps_what_was_printed(env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgespec",
            "run",
            "Write a long story about a lighthouse.",
            "--max-tokens",
            "400",
            "--ctx-size",
            "1024",
        ],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )
    assert proc.stdout is not None
    first = proc.stdout.read(20)  # text streams: the interrupt lands mid-answer
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert len(first + rest) >= 20 and b"Traceback" not in err


@pytest.mark.real
def test_prompt_longer_than_the_context(env: dict[str, str]) -> None:
    res = edgespec("run", "word " * 200, "--ctx-size", "64", "--drafter", "none", env=env)
    assert res.returncode == 1
    assert "context holds 64" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--temperature", "-1"), "temperature must be >= 0"),
        (("--top-p", "0"), "top-p must be in (0, 1]"),
        (("--top-p", "1.5"), "top-p must be in (0, 1]"),
        (("--min-p", "1"), "min-p must be in [0, 1)"),
        (("--top-k", "-2"), "top-k must be >= 0"),
        (("-k", "-1"), "--draft-tokens must be >= 0"),
        (("--drafter", "magic"), "unknown drafter 'magic'"),
        (("--max-tokens", "0"), "--max-tokens must be >= 1"),
        (("--seed", "-1"), "--seed must be in [0, 2^64)"),
    ],
)
def test_bad_options_are_one_line_before_anything_loads(
    isolated: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    res = edgespec_here("run", "hi", *args, env=isolated)
    assert res.returncode == 1
    assert res.stderr.strip() == f"edgespec: error: {res.stderr.strip().split('error: ', 1)[1]}"
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # Refused before anything was fetched or measured: the isolated home was never written.
    assert not Path(isolated["EDGESPEC_HOME"]).exists()
    assert not Path(isolated["HF_HOME"]).exists()


def test_binary_stdin_is_refused(isolated: dict[str, str]) -> None:
    res = edgespec_here("run", "summarise", env=isolated, input=bytes(range(256)))
    assert res.returncode == 1 and "binary data" in res.stderr
    res = edgespec_here("run", "summarise", env=isolated, input=b"\xff\xfe caf\xe9")
    assert res.returncode == 1 and "not UTF-8" in res.stderr


def test_missing_model_file(isolated: dict[str, str]) -> None:
    res = edgespec_here("run", "hi", "--target", "/nonexistent/model.gguf", env=isolated)
    assert res.returncode == 1 and "model file not found: /nonexistent/model.gguf" in res.stderr


def test_debug_shows_the_traceback(isolated: dict[str, str]) -> None:
    res = edgespec("run", "hi", "--temperature", "-1", env={**isolated, "EDGESPEC_DEBUG": "1"})
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_models_json_lists_pairs(isolated: dict[str, str]) -> None:
    res = edgespec_here("models", "--json", env=isolated)
    doc = json.loads(res.stdout)
    assert doc["default_pair"] == "qwen2.5-coder-1.5b"
    names = {p["name"] for p in doc["pairs"]}
    assert {"qwen2.5-coder-1.5b", "qwen3-8b", "llama3.1-8b", "stories15m"} <= names
    assert all(not m["on_disk"] for m in doc["models"])
    made = {m["name"]: m["derived_from"] for m in doc["models"] if m["derived_from"]}
    assert made["qwen2.5-coder-0.5b-instruct-q4_0"] == "qwen2.5-coder-0.5b-instruct-q4_k_m"


def rows(text: str) -> list[list[str]]:
    """A table printed for a pipe: its header and rows, each line's tab-separated fields."""
    return [line.split("\t") for line in text.splitlines()]


def test_models_in_a_pipe_prints_whole_names_one_a_line(isolated: dict[str, str]) -> None:
    doc = json.loads(edgespec_here("models", "--json", env=isolated).stdout)
    table = edgespec("models", env=isolated)  # stdout is a pipe, as in `edgespec models | cat`
    assert table.returncode == 0 and "…" not in table.stdout
    pairs, models = (rows(part) for part in table.stdout.split("\n\n"))
    assert pairs[0] == ["pair", "target", "draft", "size", "licence", "on disk"]
    assert [r[1:3] for r in pairs[1:]] == [[p["target"], p["draft"]] for p in doc["pairs"]]
    assert models[0] == ["model", "size", "verified", "source", "path"]
    assert [r[0] for r in models[1:]] == [m["name"] for m in doc["models"]]


def test_plan_in_a_pipe_prints_whole_lines_and_its_memory_table_tab_separated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loading, "plan_only", lambda options, drafting: fake_plan())
    result = CliRunner().invoke(app, ["plan"])  # CliRunner's stdout is not a terminal
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("hardware ") and lines[0].endswith("backend cpu")
    (fit,) = [line for line in lines if line.startswith("fit ")]
    assert fit.endswith("flash attention llama.cpp's choice")
    assert all(line == line.rstrip() for line in lines)  # no line cut at 80 columns
    table = [r for r in rows(result.stdout) if len(r) > 1]
    assert table[0] == ["model", "weights", "KV cache", "compute", "total"]
    assert table[1] == ["target: target-1.5b-instruct-q4_k_m.gguf", "1.10 GB", "0.12 GB",
                        "0.30 GB", "1.52 GB"]  # fmt: skip
    assert [r[0] for r in table[2:]] == [
        "draft: draft-0.5b-instruct-q4_k_m.gguf", "runtime", "both models",
        "usable (90% of available)",
    ]  # fmt: skip


def test_importing_edgespec_has_no_side_effects() -> None:
    code = (
        "import sys, os; before = dict(os.environ); import edgespec, edgespec.cli.app; "
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp imported'; "
        "assert dict(os.environ) == before"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_closed_stdout_is_one_line(isolated: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgespec", "run", "x"],
        env=isolated,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=(),
        preexec_fn=lambda: os.close(1),
        check=False,
        timeout=120,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err
    assert err.strip() == "edgespec: error: standard output is closed; nothing to write to"
