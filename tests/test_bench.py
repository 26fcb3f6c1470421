"""`edgespec bench`: complete reports on fake models, a caught divergence, a short real run,
and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from edgespec.api import Speculator
from edgespec.auto.config import AUTO
from edgespec.auto.learning import Bucket
from edgespec.auto.prior import CostModel
from edgespec.bench import output, report
from edgespec.bench.configs import parse_configs
from edgespec.bench.measure import Measurement
from edgespec.bench.runner import BenchResult, PromptResult, run_bench
from edgespec.bench.suites import BUILTIN, BenchPrompt, load_suite, parse_suite
from edgespec.cli import loading
from edgespec.cli.app import app
from edgespec.engine.drafters import NgramDrafter
from edgespec.errors import ConfigError
from edgespec.options import parse_drafter
from tests.conftest import ROOT, edgespec, edgespec_here, interruptible
from tests.fakes import FakeTextModel, fake_plan

PROMPTS = [BenchPrompt("fake", 0, "abcabcabcabc"), BenchPrompt("fake", 1, "hello world")]


def fake_speculator() -> Speculator:
    target = FakeTextModel(seed=2, n_ctx=256)
    draft = FakeTextModel(seed=2, n_ctx=256, noise=1.0)
    spec = Speculator(target, draft)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    return spec


def test_fake_bench_produces_complete_json_and_markdown() -> None:
    configs = parse_configs("auto,model:k=3,ngram:k=4,hybrid")
    assert [c.label for c in configs] == ["none", "auto", "model:k=3", "ngram:k=4", "hybrid"]
    result = run_bench(fake_speculator(), PROMPTS, configs, repeats=2, max_tokens=20)
    assert result.complete and not result.failures
    doc = output.document(result, {"repeats": 2}, {"machine": "test"}, {"edgespec": "x"})
    json.loads(json.dumps(doc))
    assert doc["lossless"] and doc["configs"] == [c.label for c in configs]
    prompt = doc["prompts"][0]
    assert set(prompt["runs"]) == {c.label for c in configs}
    assert all(len(runs) == 2 for runs in prompt["runs"].values())
    assert prompt["speedup"]["none"] == 1.0
    assert {
        "tokens_per_s",
        "acceptance_rate",
        "mean_accepted_length",
        "draft_share",
        "ttft_s",
        "peak_rss",
    } <= set(prompt["runs"]["auto"][0])
    assert len(doc["summary"]) == len(configs) and len(doc["hindsight"]) == len(PROMPTS)
    # auto's runs say how far its predicted round times were from the measured ones.
    assert all(r["round_time_error"] for r in prompt["runs"]["auto"])
    assert not prompt["runs"]["ngram:k=4"][0]["round_time_error"]
    assert {r["round"] for r in doc["round_time_prediction"]} <= {"suffix", "model", "none"}
    md = output.markdown(result, {"machine": "test", "total_ram": 1e9})
    assert "| fake | hybrid |" in md and "best fixed" in md and "predicted against" in md


class PollutingDrafter(NgramDrafter):
    """A planted bug: it decodes junk into the target's cache, so later logits are wrong."""

    def __init__(self, target: FakeTextModel) -> None:
        super().__init__()
        self.target = target

    def offer(self, tokens, room):  # type: ignore[no-untyped-def]
        if len(tokens) > 16:
            self.target.tokens[-1] = (self.target.tokens[-1] + 1) % self.target.n_vocab
        return super().offer(tokens, room)


def test_planted_divergence_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = fake_speculator()
    real = spec.drafter
    monkeypatch.setattr(
        spec,
        "drafter",
        lambda name: (
            PollutingDrafter(spec.target) if parse_drafter(name).name == "ngram" else real(name)
        ),
    )
    result = run_bench(spec, PROMPTS, parse_configs("ngram:k=4"), repeats=1, max_tokens=30)
    failures = result.failures
    assert failures and all(label == "ngram:k=4" for _, label, _ in failures)
    assert "NO: differs at token" in output.markdown(result, {})


def test_builtin_suites_are_valid() -> None:
    for name in BUILTIN:
        if name == "structured":
            continue  # test_the_structured_suite
        prompts = load_suite(name)
        assert 5 <= len(prompts) <= 10
    editing = load_suite("code_editing")
    assert all("```" in p.prompt for p in editing)  # the code to edit is in the prompt
    sessions = load_suite("multi_turn_editing")  # the same file edited 4 times in a row
    assert [(p.session, p.turn) for p in sessions[:4]] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert sessions[0].file and all(p.file is None for p in sessions[1:4])


def test_an_editing_session_edits_the_last_answer_with_the_earlier_turns_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collections.abc import Sequence

    from edgespec.auto.index import SuffixMemory

    remembered: list[int] = []
    forget = SuffixMemory.forget

    def spy(self: SuffixMemory, history: Sequence[Sequence[int]] = ()) -> None:
        if history:
            remembered.append(len(history))
        forget(self, history)

    monkeypatch.setattr(SuffixMemory, "forget", spy)
    spec = fake_speculator()
    suite = parse_suite("mt", '{"file": "abcabc", "turns": ["one", "two", "three"]}\n', "mt.jsonl")
    result = run_bench(spec, suite, parse_configs("auto"), repeats=2, max_tokens=12)
    assert result.complete and not result.failures and len(result.prompts) == 3
    # Turn 1 runs alone, turn 2 with turn 1 in the session, turn 3 with both: 2 configs x 2.
    assert remembered == [1] * 4 + [2] * 4
    assert result.prompts[1].prompt.edit_prompt("X").startswith("two Return the whole file")
    (row,) = report.session_rows(result)
    assert row[:2] == ["mt", "1"] and row[-1].endswith("x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "a"}\n{"prompt": 3}\n', "line 2: 'prompt' must be a non-empty string"),
        ('{"prompt": "a"}\nnot json\n', "line 2: not valid JSON"),
        ('{"prompt": "a", "colour": 1}\n', "line 1: unknown field 'colour'"),
        ('{"prompt": "a", "max_tokens": 0}\n', "line 1: 'max_tokens' must be a positive integer"),
        ("[1, 2]\n", "line 1: expected a JSON object"),
        ("\n\n", "the suite has no prompts"),
        ('{"file": "x = 1", "turns": []}\n', "line 1: 'turns' must be a list of non-empty"),
        ('{"file": "", "turns": ["a"]}\n', "line 1: 'file' must be a non-empty string"),
        ('{"file": "x", "turns": ["a"], "prompt": "b"}\n', "line 1: unknown field 'prompt'"),
        ('{"prompt": "a", "schema": [1]}\n', "line 1: 'schema' must be a JSON object"),
        (
            '{"prompt": "a", "schema": {"type": "string", "format": "weird"}}\n',
            "line 1: the JSON schema cannot be used: .*weird",
        ),
    ],
)
def test_malformed_suites_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_suite("mine", text, "mine.jsonl")


def test_tree_width_is_an_option_of_auto() -> None:
    configs = parse_configs("auto:w=1,auto:k=8:w=4,auto")
    assert [(c.label, c.k, c.width) for c in configs[1:]] == [
        ("auto:w=1", None, 1),
        ("auto:k=8:w=4", 8, 4),
        ("auto", None, None),
    ]


@pytest.mark.parametrize(
    "configs", ["nope", "model:q=3", "ngram:k=x", ",", "ngram:w=2", "auto:w=0", "auto:k=2:k=3"]
)
def test_unknown_configs(configs: str) -> None:
    with pytest.raises(ConfigError):
        parse_configs(configs)


def test_bad_input_on_the_command_line(tmp_path: Path, isolated: dict[str, str]) -> None:
    res = edgespec_here("bench", "--configs", "none,turbo", env=isolated)
    assert res.returncode == 1 and "unknown config 'turbo'" in res.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": ""}\n')
    res = edgespec_here("bench", "--suite", str(bad), env=isolated)
    assert res.returncode == 1 and "line 2" in res.stderr and "Traceback" not in res.stderr
    res = edgespec_here("bench", "--suite", "nonexistent", env=isolated)
    assert res.returncode == 1 and "unknown suite 'nonexistent'" in res.stderr
    res = edgespec_here("bench", "--plot", str(tmp_path / "chart.gif"), env=isolated)
    assert res.returncode == 1 and "PNG or SVG" in res.stderr


@pytest.mark.parametrize(
    ("option", "where", "message"),
    [
        ("--json", "missing/out.json", "does not exist"),
        ("--markdown", ".", "is a folder"),
        ("--plot", "missing/chart.png", "does not exist"),
    ],
)
def test_output_paths_are_checked_before_anything_runs(
    tmp_path: Path, isolated: dict[str, str], option: str, where: str, message: str
) -> None:
    res = edgespec_here("bench", option, str(tmp_path / where), env=isolated)
    assert res.returncode == 1 and message in res.stderr and option in res.stderr
    assert not Path(isolated["EDGESPEC_HOME"]).exists()  # nothing fetched, loaded or measured


def test_out_of_range_values_are_refused_before_models_load(isolated: dict[str, str]) -> None:
    for args, message in ((("--seed", "-1"), "--seed must be in"), (("-r", "0"), "--repeats")):
        res = edgespec_here("bench", *args, env=isolated)
        assert res.returncode == 1 and message in res.stderr, res.stderr
        assert not Path(isolated["EDGESPEC_HOME"]).exists()


def test_missing_plot_extra_is_a_clear_error(tmp_path: Path, isolated: dict[str, str]) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        res = edgespec_here("bench", "--plot", str(tmp_path / "chart.png"), env=isolated)
        assert res.returncode == 1 and "pip install 'edgespec[plot]'" in res.stderr
    else:
        result = run_bench(
            fake_speculator(), PROMPTS[:1], parse_configs("ngram:k=4"), repeats=1, max_tokens=8
        )
        output.plot(result, tmp_path / "chart.png")
        assert (tmp_path / "chart.png").stat().st_size > 0


def one_prompt_suites(tmp_path: Path) -> list[str]:
    args = []
    for name in BUILTIN:
        first = load_suite(name)[0]
        path = tmp_path / f"{name}.jsonl"
        if first.session is None:
            doc = {"prompt": first.prompt, "system": first.system, "schema": first.schema}
        else:  # an editing session: its first two turns
            turns = [p.prompt for p in load_suite(name)[:2]]
            doc = {"file": first.file, "turns": turns, "language": first.language}
        path.write_text(json.dumps(doc) + "\n")
        args += ["--suite", str(path)]
    return args


@pytest.mark.real
def test_short_real_bench_completes_and_its_json_validates(real_pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    res = edgespec(
        "bench",
        *one_prompt_suites(tmp_path),
        "--configs",
        "none,auto,ngram:k=4,model:k=2",
        "--max-tokens",
        "12",
        "--repeats",
        "1",
        "--ctx-size",
        "2048",
        "--json",
        str(out),
        "--markdown",
        str(md),
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] and doc["lossless"]
    # a prompt per suite, two turns of the editing session
    assert len(doc["prompts"]) == len(BUILTIN) + 1
    assert doc["configs"] == ["none", "auto", "ngram:k=4", "model:k=2"]
    assert len(doc["sessions"]) == 1  # the editing session: its second turn against its first
    assert doc["machine"]["physical_cores"] >= 1 and doc["versions"]["llama_cpp_python"]
    assert "| code_generation | none |" in md.read_text()
    assert "speedup" in res.stdout
    # With a real calibration auto learns its costs, and its predictions are reported.
    assert doc["round_time_prediction"] and all(
        float(r["median error"].rstrip("%")) >= 0 for r in doc["round_time_prediction"]
    )
    # The draft model's Python side per step is measured where it drafted, not elsewhere.
    runs = [p["runs"] for p in doc["prompts"]]
    assert any(r["model:k=2"][0]["draft_outside_ms"] is not None for r in runs)
    assert all(r["none"][0]["draft_outside_ms"] is None for r in runs)


@pytest.mark.real
def test_ctrl_c_prints_the_partial_table(real_pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgespec",
            "bench",
            "--suite",
            "chat",
            "--configs",
            "none,ngram:k=4",
            "--max-tokens",
            "64",
            "--repeats",
            "3",
            "--ctx-size",
            "2048",
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )
    assert proc.stderr is not None
    seen = []
    while not any(b"chat #1: done" in line for line in seen):  # the first prompt is measured
        line = proc.stderr.readline()
        assert line, b"".join(seen)
        seen.append(line)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err and b"interrupted" in err
    assert b"chat" in out and b"ngram:k=4" in out  # the runs measured so far are shown


@pytest.mark.real
def test_prompt_longer_than_the_context(real_pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "word " * 400}) + "\n")
    res = edgespec("bench", "--suite", str(long), "--ctx-size", "256", "--configs", "none")
    assert res.returncode == 1 and "do not fit the context of 256" in res.stderr


def bench_on_fakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suite: str, *extra: str
) -> tuple[str, dict[str, Any]]:
    """`edgespec bench --max-tokens 5` on the fake pair, stdout a pipe: its stdout, its JSON."""
    spec = fake_speculator()
    spec.plan = fake_plan()
    monkeypatch.setattr(loading, "load", lambda options, drafting: spec)
    (tmp_path / "mine.jsonl").write_text(suite)
    args = ["bench", "--suite", str(tmp_path / "mine.jsonl"), "--configs", "none,ngram:k=4"]
    args += ["--max-tokens", "5", "--repeats", "1", "--json", str(tmp_path / "bench.json")]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    return result.stdout, json.loads((tmp_path / "bench.json").read_text())


def test_the_run_cap_holds_for_every_prompt_and_each_records_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = '{"prompt": "abcabc", "max_tokens": 12}\n{"prompt": "hello", "max_tokens": 3}\n'
    _, doc = bench_on_fakes(tmp_path, monkeypatch, suite)
    assert doc["settings"]["max_tokens"] == 5
    # The smaller of the two caps wins (the fake model never stops early) ...
    generated = [{r["generated"] for rs in p["runs"].values() for r in rs} for p in doc["prompts"]]
    assert generated == [{5}, {3}]
    # ... and each prompt's entry says which it ran with.
    assert [p["max_tokens"] for p in doc["prompts"]] == [5, 3]


def test_bench_tables_in_a_pipe_are_tab_separated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdout, doc = bench_on_fakes(tmp_path, monkeypatch, '{"prompt": "abcabc"}\n')
    summary, parts, per_prompt = (
        [line.split("\t") for line in part.splitlines()] for part in stdout.split("\n\n")
    )
    assert summary[0] == report.SUMMARY_COLUMNS and per_prompt[0] == report.PROMPT_COLUMNS
    assert parts[0] == report.PARTS_COLUMNS
    assert [r[:2] for r in summary[1:]] == [[s["suite"], s["config"]] for s in doc["summary"]]
    assert [r[2] for r in per_prompt[1:]] == doc["configs"]


def test_bench_result_survives_partial_runs() -> None:
    result = BenchResult(parse_configs("ngram"))
    assert report.summary_rows(result) == [] and output.markdown(result, {})


def test_the_best_fixed_configuration_is_also_chosen_on_the_other_runs() -> None:
    def runs(*speeds: float) -> list[Measurement]:
        return [Measurement(s, 100, 0.0, 1.0, 0.0, 0.1, 0, "stop") for s in speeds]

    prompt = BenchPrompt("s", 0, "p")
    # Alike configurations: in hindsight B (median 11) beats auto by 10 %; chosen on two runs
    # and timed on the third, the best fixed is a draw among equals and auto is level with it.
    alike = PromptResult(
        prompt, {"none": runs(10, 10, 11), "auto": runs(10, 10, 10), "B": runs(11, 10, 11)}
    )
    assert report.best_fixed(alike) == ("B", 1.1)
    # Left out: run 0 -> chosen on runs 1-2 (B 10.5, none 10.5: the first), and so on.
    assert report.heldout_ratio(alike) == pytest.approx((10 / 10 * 10 / 10 * 10 / 11) ** (1 / 3))
    # A configuration better on every run is chosen every time; the table shows the ratio.
    configs = parse_configs("none,auto,ngram:k=4")
    better = PromptResult(
        prompt, {"none": runs(10, 10), "auto": runs(20, 22), "ngram:k=4": runs(15, 16)}
    )
    assert report.heldout_ratio(better) == pytest.approx((20 / 15 * 22 / 16) ** 0.5)
    assert report.hindsight_rows(BenchResult(configs, [better]))[0][-2:] == ["135%", "135%"]
    # One repeat: nothing to hold out.
    once = PromptResult(prompt, {"none": runs(10), "auto": runs(12), "ngram:k=4": runs(11)})
    assert report.heldout_ratio(once) is None
    assert report.hindsight_rows(BenchResult(configs, [once]))[0][-1] == "-"


def test_near_tie_means_both_tokens_close_to_the_best() -> None:
    import numpy as np

    from edgespec.bench.runner import near_tie

    three_way = np.array([5.0, 5.1, 5.05, 1.0])
    assert near_tie(three_way, 0, 2) == (pytest.approx(0.05), True)  # token 1 is the best
    assert near_tie(np.array([5.0, 3.5, 1.0]), 0, 1)[1] is False


def test_each_bench_run_starts_auto_from_its_priors() -> None:
    spec = fake_speculator()
    assert spec.auto_learned is not None
    spec.auto_learned.state.alpha[Bucket.LONG] = 0.99
    run_bench(spec, PROMPTS[:1], parse_configs("auto"), repeats=1, max_tokens=8)
    spec.reset()
    assert spec.auto_learned.state.alpha[Bucket.LONG] == AUTO.policy.prior_long


class TimedDraft(FakeTextModel):
    """A draft that, like llama.cpp's adapter, counts the time spent inside its decodes."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.decode_s, self.decodes = 0.0, 0

    def decode(self, tokens, n_logits=1):  # type: ignore[no-untyped-def]
        self.decodes += 1
        self.decode_s += 1e-9  # next to nothing: the rest of a draft step is outside it
        return super().decode(tokens, n_logits)


def test_the_draft_models_time_outside_its_decodes_is_reported_per_step() -> None:
    spec = Speculator(FakeTextModel(seed=2, n_ctx=256), TimedDraft(seed=2, n_ctx=256))
    result = run_bench(spec, PROMPTS[:1], parse_configs("model:k=3"), repeats=1, max_tokens=12)
    runs = result.prompts[0].runs
    assert runs["model:k=3"][0].draft_outside_ms is not None
    assert runs["model:k=3"][0].draft_outside_ms > 0 and runs["none"][0].draft_outside_ms is None
    row = next(r for r in report.summary_rows(result) if r[1] == "model:k=3")
    assert row[report.SUMMARY_COLUMNS.index("py ms/step")] != "-"


def test_sampled_benchmarks_record_their_sampler_and_every_configurations_acceptance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = ("--temperature", "0.7", "--top-p", "0.9", "--seed", "3")
    _, doc = bench_on_fakes(tmp_path, monkeypatch, '{"prompt": "abcabcabc"}\n', *extra)
    assert (doc["settings"]["temperature"], doc["settings"]["top_p"]) == (0.7, 0.9)
    run = doc["prompts"][0]["runs"]["ngram:k=4"][0]
    assert 0.0 <= run["acceptance_rate"] <= 1.0 and run["generated"] == 5
