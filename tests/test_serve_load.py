"""benchmarks/serve/load.py, briefly, against `serve` over fake models in this process: every
kind of client runs, the bad requests are refused as expected, and the report adds up."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

from edgespec.api import Speculator
from edgespec.planner.costs import CostModel
from edgespec.server.app import create_app
from tests.conftest import ROOT
from tests.fakes import FakeTextModel
from tests.test_serve import live


def load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load", ROOT / "benchmarks/serve/load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["load"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_load_script_reports_what_it_drove() -> None:
    load = load_module()
    spec = Speculator(FakeTextModel(seed=4, n_ctx=512), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    with live(create_app(spec, model_names=["fake"])) as port:
        url = f"http://127.0.0.1:{port}"
        report = load.load(url, os.getpid(), clients=6, duration=2.0, seed=2, stall_s=0.2)
    outcomes = report["outcomes_not_served"]
    assert report["requests"] == report["served"] + sum(outcomes.values())
    assert report["served"] > 0 and report["greedy_checked"] == report["served"]
    assert report["greedy_differing"] == []  # the fake model decodes the same alone or not
    # Only what the script meant: refusals it sent and clients it took away.
    assert all(k.startswith("refused_") or k == "client_left" for k in outcomes), outcomes
    assert report["latency_s"]["p50"] is not None and report["rss_mb"]["peak"] > 0
