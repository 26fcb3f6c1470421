"""benchmarks/serve_mixed.py (`serve_load.py --workload mixed|throughput`), briefly, against `serve`
with two slots over a fake model in this process: every class of client runs, the editor's
cancelled completions are counted apart, and the report adds up."""

from __future__ import annotations

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
from tests.conftest import ROOT
from tests.fakes import FakeTextModel
from tests.script_module import load_file
from tests.test_serve import live


def test_the_mixed_and_throughput_workloads_report_what_they_drove() -> None:
    mixed = load_file(ROOT / "benchmarks/serve_mixed.py")
    spec = Speculator(FakeTextModel(seed=4, n_ctx=1024, sequences=2), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    app = create_app(spec, model_names=["fake"], slots=2)
    with live(app) as port:
        url = f"http://127.0.0.1:{port}"
        report = mixed.run(url, "mixed", clients=0, chats=1, duration=2.0, seed=3)
        tput = mixed.run(url, "throughput", clients=2, chats=0, duration=1.0, seed=3)
    assert report["errors"] == [] and tput["errors"] == []
    editor, chat = report["classes"]["editor"], report["classes"]["chat"]
    assert editor["requests"] == editor["completed"] + editor["cancelled"] > 0
    assert chat["completed"] > 0 and chat["tokens"] == 512 * chat["completed"]
    assert editor["latency_s"]["p95"] is not None and chat["ttft_s"]["p50"] is not None
    both = tput["classes"]["throughput"]
    assert both["tokens"] == 128 * both["completed"] and both["tokens_per_s"] > 0
    assert app.state.worker.batch.passes > 0  # the slots shared passes
