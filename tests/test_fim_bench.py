"""The FIM benchmark (benchmarks/fim/fim.py) on a handful of standard-library spans, against
fake /infill servers: the spans it cuts, the requests it sends, and what it reports."""

from __future__ import annotations

import json
import sysconfig
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.script_module import load_file

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def fim() -> ModuleType:
    return load_file(ROOT / "benchmarks/fim/fim.py")


class FakeInfill:
    """An /infill server that answers with a text made from the request: `differ` changes the
    text for prompts of an odd length, as a drafter that broke losslessness would."""

    def __init__(self, differ: bool) -> None:
        self.bodies: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                odd = len(body["input_prefix"]) % 2 == 1
                content = f"n = {len(body['input_prefix'])}\n" + ("x\n" if differ and odd else "")
                doc = {
                    "content": content,
                    "stop_type": "eos",
                    "timings": {"predicted_n": 5, "predicted_ms": 250.0, "prompt_n": 40,
                                "prompt_ms": 100.0, "draft_n": 4, "draft_n_accepted": 3},
                }  # fmt: skip
                raw = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture()
def fakes() -> Iterator[tuple[FakeInfill, FakeInfill]]:
    none, auto = FakeInfill(differ=False), FakeInfill(differ=True)
    yield none, auto
    none.httpd.shutdown()
    auto.httpd.shutdown()


def test_spans_are_cut_from_the_stdlib_at_seeded_places_of_each_kind(fim: ModuleType) -> None:
    spans = fim.cut_spans(STDLIB, 9, seed=3, prefix_lines=12, suffix_lines=4)
    assert spans == fim.cut_spans(STDLIB, 9, seed=3, prefix_lines=12, suffix_lines=4)
    assert [s.kind for s in spans] == ["line", "block", "body"] * 3
    assert len({s.id for s in spans}) == 9
    for s in spans:
        lines = (STDLIB / s.file).read_text(encoding="utf-8").split("\n")
        n = s.expected.count("\n") + 1
        taken = lines[s.line - 1 : s.line - 1 + n]
        assert "\n".join(taken) == s.expected and s.expected.strip()
        before = lines[max(0, s.line - 1 - 12) : s.line - 1]
        after = lines[s.line - 1 + n : s.line - 1 + n + 4]
        # llama.vim's context on the blank line left: nothing of the cursor's line around it
        assert s.input_prefix == "\n".join(before) + "\n" and s.prompt == ""
        assert s.input_suffix == "\n" + "\n".join(after) + "\n"
        if s.kind == "line":
            assert n == 1
        elif s.kind == "block":
            assert 2 <= n <= 10


def test_the_benchmark_sends_each_span_greedy_to_every_server_and_reports(
    fim: ModuleType, fakes: tuple[FakeInfill, FakeInfill], tmp_path: Path
) -> None:
    none, auto = fakes
    out, md = tmp_path / "fim.json", tmp_path / "fim.md"
    doc = fim.main([
        "--spans", "6", "--seed", "7", "--n-predict", "24", "--prefix-lines", "10",
        "--url", f"edgespec none={none.url}", "--url", f"edgespec auto={auto.url}",
        "--json", str(out), "--markdown", str(md),
    ])  # fmt: skip
    assert json.loads(out.read_text()) == doc and "edgespec auto" in md.read_text()
    spans = doc["spans"]
    assert len(spans) == 6 and len(none.bodies) == len(auto.bodies) == 7  # and one to warm up
    assert none.bodies[0] == fim.WARM_UP
    assert not any(fim.WARM_UP["input_prefix"] in s["input_prefix"] for s in spans)
    for body, span in zip(none.bodies[1:], spans, strict=True):
        assert body["input_prefix"] == span["input_prefix"]
        assert body["input_prefix"].count("\n") <= 10
        assert (body["temperature"], body["top_k"], body["t_max_predict_ms"]) == (0.0, 1, 0)
        assert body["n_predict"] == 24
    odd = [s["id"] for s in spans if len(s["input_prefix"]) % 2 == 1]
    match = doc["exact_match"]["edgespec auto vs edgespec none"]
    assert (match["of"], match["differ"]) == (6, odd)
    summary = doc["summary"]["all"]["edgespec none"]
    assert summary["spans"] == 6 and summary["tokens"] == 30
    assert summary["gen_tok_s"] == pytest.approx(20.0)  # 5 tokens in 0.25 s, every span
    assert summary["accepted_of_drafted"] == pytest.approx(0.75)
    assert summary["p50_s"] <= summary["p95_s"]
    assert {k for k in doc["summary"] if k != "all"} <= set(fim.KINDS)
