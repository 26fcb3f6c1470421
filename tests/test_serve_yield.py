"""benchmarks/serve_yield.py, briefly, against `serve` with two slots over a fake model in this
process: both requests alone and beside each other, per drafter, and the report adds up."""

from __future__ import annotations

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
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
