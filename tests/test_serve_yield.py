"""benchmarks/serve_yield.py, briefly, against `serve` with two slots over a fake model in this
process: both requests alone and beside each other, per drafter, and the report adds up; and what
the server shows per lane (/metrics, `serve --json`): the K chosen, pass sizes, waits."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgespec.api import DoneEvent, GenerationStats, Speculator
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
from edgespec.server.metrics import Metrics
from tests.conftest import ROOT
from tests.fakes import FakeTextModel
from tests.script_module import load_file
from tests.test_serve import live


def test_the_yield_tool_reports_latencies_rates_and_greedy_texts_per_drafter() -> None:
    tool = load_file(ROOT / "benchmarks/serve_yield.py")
    spec = Speculator(FakeTextModel(seed=4, n_ctx=1024, sequences=2), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    app = create_app(spec, model_names=["fake"], slots=2)
    with live(app) as port:
        report = tool.run(f"http://127.0.0.1:{port}", ["auto", "none"], runs=2, after=8)
    assert report["runs"] == 2 and set(report["drafters"]) == {"auto", "none"}
    for summary in report["drafters"].values():
        for name in ("short_16", "short_32"):
            short = summary[name]
            assert short["latency_alone_s"] > 0 and short["latency_beside_s"] > 0
            assert short["ratio"] > 0
        long = summary["long"]
        assert long["tokens_per_s_alone"] > 0 and long["tokens_per_s_beside"] > 0
        assert summary["texts_differing"] == []  # the fake decodes the same alone or not
    assert app.state.worker.batch.passes > 0  # the slots shared passes


def test_a_rate_is_taken_between_two_chunks_that_came_apart() -> None:
    tool = load_file(ROOT / "benchmarks/serve_yield.py")
    assert tool.rate([0.0, 0.5, 1.0, 2.0], 1, 3) == 2 / 1.5
    assert tool.rate([0.0, 0.5], 1, 1) is None and tool.rate([0.0, 0.5], 0, 2) is None


def _lanes_stats() -> list[GenerationStats]:
    """A long and a short answer in two lanes of a fake pair, read in turn."""
    spec = Speculator(FakeTextModel(seed=4, n_ctx=256, sequences=2), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    streams = [
        lane.stream(p, max_tokens=n)
        for lane, (p, n) in zip(spec.lanes(2), (("abcabc", 60), ("cab", 12)), strict=True)
    ]
    done: list[GenerationStats] = []
    while len(done) < 2:
        for stream in streams:
            event = next(stream, None)
            if isinstance(event, DoneEvent):
                done.append(event.stats)
    return sorted(done, key=lambda stats: stats.lane)


def test_metrics_count_each_lanes_rounds_k_passes_and_waits() -> None:
    metrics = Metrics()
    lanes = _lanes_stats()
    for stats in lanes:
        metrics.generation(stats)
    value = {
        (s.name, s.labels.get("lane")): s.value
        for f in text_string_to_metric_families(metrics.text().decode())
        for s in f.samples
    }
    for stats in lanes:
        lane = str(stats.lane)
        assert value[("edgespec_lane_rounds_total", lane)] == stats.rounds > 0
        assert value[("edgespec_lane_k_chosen_total", lane)] == stats.k_chosen
        # Its tokens and the other lane's, while both ran.
        assert value[("edgespec_lane_pass_tokens_total", lane)] > stats.rounds
        assert value[("edgespec_lane_pass_wait_seconds_total", lane)] == stats.pass_s > 0


def test_serve_json_logs_each_answer_with_its_lanes_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from edgespec.cli.serve_cmd import _json_line

    stats = _lanes_stats()[1]
    _json_line("POST", "/v1/chat/completions", 200, stats)
    _json_line("GET", "/\x1b[2J", 404, None)
    out = capsys.readouterr().out
    answer, refused = (json.loads(line) for line in out.splitlines())
    assert answer["status"] == 200 and answer["stats"]["lane"] == 1
    assert answer["stats"]["mean_pass_tokens"] == round(stats.mean_pass_tokens, 3)
    assert {"mean_k", "wait_per_pass_s", "generated_tokens"} <= set(answer["stats"])
    assert refused == {"method": "GET", "path": "/\x1b[2J", "status": 404}
    assert "\x1b" not in out  # the caller's path, escaped
