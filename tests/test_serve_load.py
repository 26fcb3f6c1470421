"""benchmarks/serve_load.py and its clients (serve_clients.py), briefly, against `serve` over
fake models in this process: every kind of client runs, the bad requests are refused as
expected, and the report adds up."""

from __future__ import annotations

import os
import random
from types import ModuleType

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
from tests.conftest import ROOT
from tests.fakes import FakeFimModel, FakeTextModel
from tests.grammars import EchoChatModel
from tests.script_module import load_file
from tests.test_serve import live


def load_module(name: str = "serve_load") -> ModuleType:
    return load_file(ROOT / f"benchmarks/{name}.py")


def test_the_load_script_reports_what_it_drove() -> None:
    load = load_module()
    spec = Speculator(FakeTextModel(seed=4, n_ctx=512), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    with live(create_app(spec, model_names=["fake"])) as port:
        url = f"http://127.0.0.1:{port}"
        report = load.load(url, os.getpid(), clients=6, duration=2.0, seed=2, stall_s=0.2)
    outcomes = report["outcomes_not_served"]
    assert report["requests"] == report["served"] + sum(outcomes.values())
    kinds = load_module("serve_clients").GREEDY
    greedy = sum(n for kind, n in report["served_by_kind"].items() if kind in kinds)
    assert report["served"] > 0 and report["greedy_checked"] == greedy
    assert report["server_errors"] == 0 and report["violations"] == 0, report
    assert report["greedy_differing"] == []  # the fake model decodes the same alone or not
    # Only what the script meant: refusals it sent and clients it took away.
    assert all(k.startswith("refused_") or k == "client_left" for k in outcomes), outcomes
    assert report["latency_s"]["p50"] is not None and report["rss_mb"]["peak"] > 0


def test_the_hostile_clients_find_no_violation_where_the_server_keeps_to_the_rules() -> None:
    """Over a model that echoes an injected call to an undeclared tool (the fabrication the
    script asks for): no tool call but a declared one, stops that leave valid JSON or "length",
    and hostile schemas refused with a 400 naming the schema field or followed."""
    clients = load_module("serve_clients")
    spec = Speculator(EchoChatModel(clients.FABRICATE.split("\n")[1], chars=True), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    with live(create_app(spec, model_names=["fake"])) as port:
        run = clients.Run("127.0.0.1", port, 0.0, 1, 0.2)
        rng = random.Random(3)
        outcomes = [clients._fabricate(run, 0.0), clients._cut(run, rng, 0.0)]
        outcomes += [clients._hostile(run, rng, 0.0) for _ in range(3)]
    assert [o.error for o in outcomes if o.error and not o.error.startswith("refused_")] == []
    # The check itself: the fabricated call, or arguments its schema refuses, are violations.
    fabricated = {"function": {"name": "delete_everything", "arguments": '{"path": "/"}'}}
    assert not clients._declared(fabricated)
    assert not clients._declared({"function": {"name": "get_weather", "arguments": '{"town": 1}'}})
    assert clients._declared({"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}})
    assert not clients._is_city('{"city": "Paris"')
    assert clients._is_city('{"city": "P", "population": 2}')


def test_the_soak_drives_every_endpoint_and_finds_every_answer_its_idle_text() -> None:
    soak = load_module("serve_soak")
    spec = Speculator(FakeFimModel(seed=4, n_ctx=512, sequences=4), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False)
    with live(create_app(spec, model_names=["fake"], slots=4)) as port:
        report = soak.run(f"http://127.0.0.1:{port}", clients=4, duration=3.0, seed=1)
    kinds = {f"{e}{s}" for e in soak.ENDPOINTS for s in ("", "_stream")}
    assert set(report["served_by_endpoint"]) == kinds, report
    assert report["requests"] == report["served"] and report["idle_failures"] == []
    assert report["failed_where_idle_answers"] == 0 and report["differing_from_idle"] == 0
