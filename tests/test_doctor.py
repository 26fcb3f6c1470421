"""`edgespec doctor` and the automatic smoke test of the llama.cpp build: planted crashes,
cached verdicts, and a doctor that never crashes itself."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgespec.cli.app import app
from edgespec.diagnose import checks, cpu, smoke
from tests.conftest import RealPair, closed_port, edgespec

SIGILL = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
PASSES = [sys.executable, "-c", "print('ok')"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    return tmp_path / "home"


def plant(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.setattr(smoke, "child_command", lambda model: command)


def test_doctor_diagnoses_a_planted_sigill(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch, SIGILL)
    model = tmp_path / "any.gguf"
    model.write_bytes(b"GGUF")
    result = CliRunner().invoke(app, ["doctor", "--model", str(model)])
    assert result.exit_code == 1, result.output
    line = next(x for x in result.output.splitlines() if "test decode" in x)
    assert line.startswith("✗") and "SIGILL (illegal instruction)" in line
    assert "pip install --force-reinstall --no-cache-dir" in result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit
    )
    doc = CliRunner().invoke(app, ["doctor", "--model", str(model), "--json"])
    report = json.loads(doc.stdout)
    assert doc.exit_code == 1 and report["ok"] is False
    crash = next(c for c in report["checks"] if c["name"] == "test decode")
    assert crash["status"] == "fail" and "SIGILL" in crash["detail"] and crash["fix"]


def test_a_crashing_build_stops_a_command_with_one_clear_line(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch, SIGILL)
    with pytest.raises(smoke.LibraryCrashError) as caught:
        smoke.ensure_works(Path("model.gguf"))
    message = str(caught.value)
    assert "\n" not in message and "SIGILL" in message and "edgespec doctor" in message
    assert "-mno-amx-tile" in message or "x86" not in os.uname().machine
    assert smoke.cached_verdict() is None  # a failure is never remembered


def test_a_pass_is_cached_for_this_build_only(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes: list[str] = []
    plant(monkeypatch, PASSES)
    smoke.ensure_works(Path("model.gguf"), notes.append)
    assert len(notes) == 1 and smoke.cached_verdict() is not None
    # Later runs of the same build pay nothing: even a crash planted now is not run.
    plant(monkeypatch, SIGILL)
    smoke.ensure_works(Path("model.gguf"), notes.append)
    assert len(notes) == 1
    # Another build (another library file, size or mtime) is tested anew.
    monkeypatch.setattr(smoke, "library_key", lambda: "another-build")
    assert smoke.cached_verdict() is None
    with pytest.raises(smoke.LibraryCrashError):
        smoke.ensure_works(Path("model.gguf"))


def test_an_unwritable_cache_still_runs_the_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("EDGESPEC_HOME", str(blocker))
    plant(monkeypatch, PASSES)
    assert smoke.check(Path("model.gguf")).ok
    assert smoke.cached_verdict() is None
    plant(monkeypatch, SIGILL)
    assert smoke.check(Path("model.gguf")).signal == "SIGILL"


def test_an_ordinary_failure_is_left_to_the_real_load(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch, [sys.executable, "-c", "raise SystemExit('no such model')"])
    result = smoke.check(Path("model.gguf"))
    assert not result.ok and result.signal is None and result.detail == "no such model"
    smoke.ensure_works(Path("model.gguf"))  # no crash, so no error of its own


def test_mismatches_are_named() -> None:
    compiled = cpu.compiled_features(
        "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | SVE_CNT = 16 | "
        "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
    )
    assert compiled == {"SSE3", "AVX", "AVX2", "AVX512", "AMX_INT8"}
    here = cpu.CpuFeatures(
        "test",
        known=frozenset({"SSE3", "AVX", "AVX2", "AVX512", "AMX_INT8"}),
        cpu=frozenset({"SSE3", "AVX", "AVX2", "AVX512"}),
        os_enabled=frozenset({"SSE3", "AVX", "AVX2"}),
    )
    found = {(m.feature, m.problem) for m in cpu.compare(compiled, here).mismatches}
    assert found == {
        ("AVX512", "the CPU has it, but the OS does not enable it"),
        ("AMX_INT8", "this CPU does not have it"),
    }


def test_this_machine_runs_what_its_cpu_reports() -> None:
    found = cpu.detect()
    assert found.source  # says where the answer came from
    assert found.os_enabled <= found.cpu <= found.known


def test_a_check_that_raises_is_a_named_failure(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: object) -> None:
        raise RuntimeError("sensor on fire")

    monkeypatch.setattr(checks._Doctor, "disk", broken)
    report = checks.diagnose(Path("missing.gguf"))
    disk = next(c for c in report.checks if c.name == "disk space")
    assert disk.status == "fail" and "sensor on fire" in disk.detail and not report.ok


@pytest.mark.real
def test_doctor_passes_here(real_pair: RealPair) -> None:
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
    env.pop("EDGESPEC_HOME", None)
    res = edgespec("doctor", "--json", env=env)
    report = json.loads(res.stdout)
    assert res.returncode == 0 and report["ok"], res.stdout
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["test decode"] == "pass" and status["target model"] == "pass"
    assert status["draft model"] == "pass" and status["installation"] == "pass"
    assert report["versions"]["llama-cpp-python"] == smoke.llama_cpp_python_version()
    human = edgespec("doctor", env=env)
    assert human.returncode == 0 and "✓ test decode" in human.stdout


def test_a_model_changed_on_disk_is_a_failed_check(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b"GGUF" + bytes(1000)
    registry = tmp_path / "models.toml"
    registry.write_text(f"""
[models.t]
repo = "test-org/t-GGUF"
files = "t.gguf"
size = {len(payload)}
sha256 = "{hashlib.sha256(payload).hexdigest()}"
license = "MIT"

[models.d]
repo = "test-org/d-GGUF"
files = "d.gguf"
license = "MIT"

[pairs.p]
target = "t"
draft = "d"
default = true
""")
    stored = home / "models" / "test-org" / "t-GGUF" / "t.gguf"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(payload[:-1] + b"!")  # the right size, other bytes
    monkeypatch.setenv("EDGESPEC_REGISTRY", str(registry))
    report = checks.diagnose(Path("missing.gguf"))
    target = next(c for c in report.checks if c.name == "target model")
    assert target.status == "fail" and "sha256 mismatch" in target.detail and target.fix
    draft = next(c for c in report.checks if c.name == "draft model")
    assert draft.status == "skip" and "not on disk yet" in draft.detail
