"""`edgespec doctor` and the automatic smoke test of the llama.cpp build: planted crashes,
cached verdicts, and a doctor that never crashes itself."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgespec import doctor
from edgespec.buildcheck import cpu, gpus, rebuild, smoke
from edgespec.cli.app import app
from edgespec.llamacpp.rpc_servers import Endpoint, ServerInfo
from edgespec.planner import load
from tests.conftest import ROOT, RealPair, closed_port, edgespec
from tests.fakes import fake_plan

SIGILL = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
SIGABRT = [sys.executable, "-c", "import os; os.abort()"]
PASSES = [sys.executable, "-c", "print('ok')"]
CUDA_RECORD = {
    "llama_cpp_python": "0.3.36",
    "cmake_args": "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_CUDA=on",
    "cflags": "-O2 -mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "cxxflags": " -mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "machine": "x86_64",
    "python": "/opt/venv/bin/python",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    # A virtual environment of no checkout, with no installer's record unless a test writes one.
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    (tmp_path / "venv").mkdir()
    return tmp_path / "home"


def plant(
    monkeypatch: pytest.MonkeyPatch, command: list[str], on_gpu: list[str] | None = None
) -> None:
    """The child the test decode runs: `on_gpu` where it puts layers on the GPU."""
    monkeypatch.setattr(
        smoke,
        "child_command",
        lambda model, gpu_layers=0: on_gpu if on_gpu and gpu_layers else command,
    )


def record(doc: object) -> None:
    (Path(sys.prefix) / rebuild.RECORD).write_text(json.dumps(doc))


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
    assert smoke.test_now(Path("model.gguf")).ok
    assert smoke.cached_verdict() is None
    plant(monkeypatch, SIGILL)
    with pytest.raises(smoke.LibraryCrashError):
        smoke.ensure_works(Path("model.gguf"))


def test_an_ordinary_failure_is_left_to_the_real_load(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch, [sys.executable, "-c", "raise SystemExit('no such model')"])
    result = smoke.test_now(Path("model.gguf"))
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
    found = {(m.feature, m.problem) for m in cpu.compare(compiled, here)}
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

    monkeypatch.setattr(doctor._Doctor, "disk", broken)
    report = doctor.diagnose(Path("missing.gguf"))
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
    assert report["versions"]["llama-cpp-python"] == rebuild.llama_cpp_python_version()
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
    report = doctor.diagnose(Path("missing.gguf"))
    target = next(c for c in report.checks if c.name == "target model")
    assert target.status == "fail" and "sha256 mismatch" in target.detail and target.fix
    draft = next(c for c in report.checks if c.name == "draft model")
    assert draft.status == "skip" and "not on disk yet" in draft.detail


# --- the test decode on the GPU the run will use -------------------------------------------


def test_a_pass_on_the_cpu_does_not_vouch_for_the_gpu(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert smoke.child_command(Path("m.gguf"), 99)[-3:] == ["m.gguf", "--gpu-layers", "99"]
    record(CUDA_RECORD)
    plant(monkeypatch, PASSES, on_gpu=SIGABRT)  # a CUDA build for another GPU
    smoke.ensure_works(Path("model.gguf"), gpu_layers=0)
    assert smoke.cached_verdict(0) is not None and smoke.cached_verdict(99) is None
    with pytest.raises(smoke.LibraryCrashError) as caught:
        smoke.ensure_works(Path("model.gguf"), gpu_layers=99)
    message = str(caught.value)
    assert "\n" not in message and "SIGABRT" in message and "99 layers on the GPU" in message
    assert "-DCMAKE_CUDA_ARCHITECTURES=native" in message and "-DGGML_CUDA=on" in message
    assert "nvidia-smi --query-gpu=compute_cap" in message and "--gpu-layers 0" in message
    # Once it passes with its layers, that pass is remembered for them alone.
    plant(monkeypatch, PASSES)
    smoke.ensure_works(Path("model.gguf"), gpu_layers=99)
    assert smoke.cached_verdict(99) is not None and smoke.cached_verdict(-1) is None


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_the_child_loads_with_the_layers_it_is_given(
    monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    import ctypes
    from types import SimpleNamespace

    from edgespec.llamacpp import model as llamacpp

    loaded: list[int] = []
    modes: list[int] = []
    # On Windows the child first turns off the error dialogs that would hold a crashed child.
    kernel32 = SimpleNamespace(SetErrorMode=modes.append)
    monkeypatch.setattr(ctypes, "windll", SimpleNamespace(kernel32=kernel32), raising=False)
    monkeypatch.setattr(sys, "platform", platform)

    class Loaded(Exception):
        pass

    def fake_model(path: str, options: llamacpp.LoadOptions) -> None:
        loaded.append(options.n_gpu_layers)
        raise Loaded

    monkeypatch.setattr(llamacpp, "LlamaModel", fake_model)
    monkeypatch.setattr(sys, "argv", ["smoke", "m.gguf", "--gpu-layers", "7"])
    with pytest.raises(Loaded):
        smoke.main()
    assert loaded == [7]
    assert modes == ([0x8003] if platform == "win32" else [])


@pytest.mark.parametrize(
    ("gpu_offload", "servers", "draft", "draft_layers", "expected"),
    [
        (True, False, True, -1, -1),  # all layers, as the plan loads both
        (True, False, True, 0, -1),  # the draft on the CPU, the target on the GPU
        (False, False, True, -1, 0),  # a CPU build: nothing on a GPU whatever was asked
        (True, True, False, 0, 0),  # the target alone, on the RPC servers
        (True, True, True, -1, -1),  # the draft on this machine's GPU
        (True, True, True, 0, 0),  # the draft on this machine's CPU, the target on servers
    ],
)
def test_loading_tests_the_build_with_the_planned_layers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    gpu_offload: bool,
    servers: bool,
    draft: bool,
    draft_layers: int,
    expected: int,
) -> None:
    resources = fake_plan().resources
    hardware = replace(resources.hardware, gpu_offload=gpu_offload)
    server = ServerInfo(Endpoint("10.0.0.2", 50052), (3, 0, 0), ((8 << 30, 8 << 30),), 0.001)
    on = (server,) if servers else ()
    resources = replace(
        resources, hardware=hardware, n_gpu_layers=-1, draft_gpu_layers=draft_layers, servers=on
    )
    target, small = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(bytes(100))
    small.write_bytes(bytes(10))
    tested: list[tuple[Path, int]] = []

    def ensure_works(model: Path, note: object = None, gpu_layers: int = 0) -> None:
        tested.append((model, gpu_layers))
        raise smoke.LibraryCrashError("stop before loading")

    monkeypatch.setattr(smoke, "ensure_works", ensure_works)
    with pytest.raises(smoke.LibraryCrashError):
        load.load_models(target, small if draft else None, resources, None)
    assert tested == [(small if draft else target, expected)]


def test_doctor_tests_the_gpu_and_says_whether_the_cpu_alone_works(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgespec.llamacpp import backend

    monkeypatch.setattr(backend, "supports_gpu_offload", lambda: True)
    record(CUDA_RECORD)
    plant(monkeypatch, PASSES, on_gpu=SIGABRT)
    model = tmp_path / "any.gguf"
    model.write_bytes(b"GGUF")
    doc = CliRunner().invoke(app, ["doctor", "--model", str(model), "--json"])
    crash = next(c for c in json.loads(doc.stdout)["checks"] if c["name"] == "test decode")
    assert crash["status"] == "fail" and "all layers on the GPU" in crash["detail"]
    assert "on the CPU alone (--gpu-layers 0) the test decode passes" in crash["detail"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=native" in crash["fix"] and "-DGGML_CUDA=on" in crash["fix"]
    cpu_only = CliRunner().invoke(
        app, ["doctor", "--model", str(model), "--gpu-layers", "0", "--json"]
    )
    passed = next(c for c in json.loads(cpu_only.stdout)["checks"] if c["name"] == "test decode")
    assert passed["status"] == "pass"


# --- a crash on Windows ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (0xC000001D, "STATUS_ILLEGAL_INSTRUCTION"),
        (0xC0000005, "STATUS_ACCESS_VIOLATION"),
        (0xC0000409, "STATUS_STACK_BUFFER_OVERRUN"),
        (0xC00000FD, "STATUS_STACK_OVERFLOW"),
        (0xC0000420, "exception 0xC0000420"),
    ],
)
def test_a_crash_on_windows_stops_a_command_with_one_clear_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int, name: str
) -> None:
    # Windows reports a crashed child by the exception's NTSTATUS, a positive exit code.
    def crashed(command: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, code, "", "")

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(rebuild.platform, "machine", lambda: "AMD64")
    monkeypatch.setattr(smoke.subprocess, "run", crashed)
    with pytest.raises(smoke.LibraryCrashError) as caught:
        smoke.ensure_works(Path("model.gguf"))
    message = str(caught.value)
    assert "\n" not in message and f"died with {name}" in message
    assert ("illegal instruction" in message) == (name == "STATUS_ILLEGAL_INSTRUCTION")
    assert "$env:CMAKE_ARGS='-DLLAVA_BUILD=OFF -DGGML_RPC=ON'; & '" in message  # PowerShell's
    assert "-mno-amx" not in message  # GCC's flags, which MSVC does not take
    assert smoke.cached_verdict() is None


def test_an_exit_code_is_a_crash_only_where_it_means_one() -> None:
    assert smoke.crash_name(-4, "linux") == "SIGILL"
    assert smoke.crash_name(0xC000001D, "win32") == "STATUS_ILLEGAL_INSTRUCTION"
    assert smoke.crash_name(1, "win32") is None and smoke.crash_name(1, "linux") is None
    assert smoke.crash_name(0xC000001D, "linux") is None  # no such exit code outside Windows


# --- the reinstall advice keeps the flags of the build -----------------------------------------


def test_the_advice_rebuilds_with_the_recorded_flags(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rebuild.platform, "machine", lambda: "x86_64")
    record(CUDA_RECORD)
    plant(monkeypatch, SIGILL)
    with pytest.raises(smoke.LibraryCrashError) as caught:
        smoke.ensure_works(Path("model.gguf"))
    message = str(caught.value)
    assert "CMAKE_ARGS='-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_CUDA=on'" in message
    assert "CFLAGS='-O2 -mno-amx-tile -mno-amx-int8 -mno-amx-bf16'" in message
    assert "CXXFLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'" in message
    assert "-DCMAKE_CUDA_ARCHITECTURES" not in message  # a crash on the CPU: same backend


@pytest.mark.parametrize("broken", [None, "not json", '["a list"]', '{"cmake_args": "\\"open"}'])
def test_without_a_readable_record_the_advice_keeps_the_installers_flags(
    home: Path, monkeypatch: pytest.MonkeyPatch, broken: str | None
) -> None:
    if broken is not None:
        (Path(sys.prefix) / rebuild.RECORD).write_text(broken)
    monkeypatch.setattr(rebuild.platform, "machine", lambda: "aarch64")
    plant(monkeypatch, SIGILL)
    with pytest.raises(smoke.LibraryCrashError) as caught:
        smoke.ensure_works(Path("model.gguf"))
    message = str(caught.value)
    assert "CMAKE_ARGS='-DLLAVA_BUILD=OFF -DGGML_RPC=ON'" in message
    assert "-mno-amx" not in message  # an ARM machine


def test_in_a_checkout_the_advice_is_its_installer(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(ROOT / ".venv"))  # scripts/install.sh made it
    assert rebuild.checkout() == ROOT.resolve()
    monkeypatch.setattr(rebuild, "recorded_flags", lambda: rebuild.BuildFlags(("-DGGML_CUDA=on",)))
    install = f"CMAKE_ARGS=-DGGML_CUDA=on {ROOT.resolve() / 'scripts' / 'install.sh'}"
    assert rebuild.reinstall_command() == install
    gpu = smoke.SmokeResult(False, "m.gguf", 1.0, "SIGABRT", gpu_layers=-1).fix()
    assert gpu == (
        "CMAKE_ARGS='-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native' "
        f"{ROOT.resolve() / 'scripts' / 'install.sh'}"
    )


def test_the_installer_is_given_the_users_compiler_flags_too(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(ROOT / ".venv"))
    flags = rebuild.BuildFlags(("-DGGML_CUDA=on", "-DX=a b"), ("-O3",), ("-O3", "-g"))
    # As the shell reads the command, and then scikit-build-core reads CMAKE_ARGS.
    *env, script = shlex.split(rebuild.reinstall_command(flags))
    assert script == str(ROOT.resolve() / "scripts" / "install.sh")
    assert env[1:] == ["CFLAGS=-O3", "CXXFLAGS=-O3 -g"]
    name, _, cmake = env[0].partition("=")
    assert name == "CMAKE_ARGS" and shlex.split(cmake) == ["-DGGML_CUDA=on", "-DX=a b"]


# --- a CPU build on a machine with an NVIDIA GPU ------------------------------------------------

SMI = "#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: NVIDIA GeForce RTX 3060 (UUID: GPU-5e1c2f3a)'\n"
CUDA_FLAGS = "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native"


def nvidia_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's nvidia-smi on PATH, answering `-L` as it does; no CUDA toolkit (nothing
    else is on PATH)."""
    tools = tmp_path / "driver"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(SMI)
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setattr(gpus, "PROC_DRIVER", tmp_path / "no-driver")


def gpu_check(output: str) -> dict[str, str]:
    return next(c for c in json.loads(output)["checks"] if c["name"] == "GPU")


def test_a_cpu_build_on_an_nvidia_machine_fails_with_the_cuda_rebuild(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain install gives a CPU build: doctor finds the GPU it leaves unused and names the
    rebuild, with CUDA for this card, as this OS's shell takes it."""
    nvidia_machine(tmp_path, monkeypatch)
    monkeypatch.setattr(rebuild.platform, "machine", lambda: "x86_64")
    plant(monkeypatch, PASSES)
    model = tmp_path / "any.gguf"
    model.write_bytes(b"GGUF")
    result = CliRunner().invoke(app, ["doctor", "--model", str(model)])
    assert result.exit_code == 1, result.output
    line = next(x for x in result.output.splitlines() if "GPU" in x and "RTX" in x)
    assert line.startswith("✗") and "NVIDIA GeForce RTX 3060" in line
    doc = CliRunner().invoke(app, ["doctor", "--model", str(model), "--json"])
    check = gpu_check(doc.stdout)
    assert "CPU build of llama.cpp cannot use" in check["detail"]
    assert "nvcc" in check["detail"]  # no toolkit on this machine's PATH
    # sh: the variables before the command, as the shell and then scikit-build-core split them
    env, _, command = check["fix"].partition(" CFLAGS=")
    name, _, value = shlex.split(env)[0].partition("=")
    assert name == "CMAKE_ARGS" and value == CUDA_FLAGS
    assert "pip install --force-reinstall" in command


def test_on_windows_the_cuda_rebuild_is_powershells(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows: nvidia-smi in System32 (not on PATH), the advice in PowerShell's syntax."""
    system = tmp_path / "Windows"
    (system / "System32").mkdir(parents=True)
    (system / "System32" / "nvidia-smi.exe").write_bytes(b"MZ")
    smi = str(system / "System32" / "nvidia-smi.exe")

    def run(command: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        assert command == [smi, "-L"]
        return subprocess.CompletedProcess(
            command, 0, "GPU 0: NVIDIA RTX A2000 (UUID: GPU-1)\n", ""
        )

    monkeypatch.setenv("SYSTEMROOT", str(system))
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    monkeypatch.setattr(gpus.subprocess, "run", run)
    monkeypatch.setattr(gpus, "PROC_DRIVER", tmp_path / "no-driver")
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(rebuild.platform, "machine", lambda: "AMD64")
    doc = doctor._Doctor(None, None)
    doc.run(doc.versions, "installation")
    doc.run(doc.backend, "backend")
    check = doc.unused_gpu()
    assert check is not None and check.status == "fail" and "NVIDIA RTX A2000" in check.detail
    assert check.fix.startswith(f"$env:CMAKE_ARGS='{CUDA_FLAGS}'; & '")
    assert not doctor.Report((check,), {}).ok


def test_the_linux_driver_names_the_gpu_without_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = tmp_path / "nvidia"
    (driver / "gpus" / "0000:01:00.0").mkdir(parents=True)
    (driver / "gpus" / "0000:01:00.0" / "information").write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n"
    )
    (driver / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54\n")
    monkeypatch.setattr(gpus, "_smi", lambda: None)
    monkeypatch.setattr(gpus, "PROC_DRIVER", driver)
    assert gpus.nvidia_gpus() == ["NVIDIA H100 80GB HBM3"]
    (driver / "gpus" / "0000:01:00.0" / "information").unlink()
    assert gpus.nvidia_gpus() == ["an NVIDIA GPU"]


def test_no_nvidia_gpu_no_gpu_line(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpus, "_smi", lambda: None)
    monkeypatch.setattr(gpus, "PROC_DRIVER", tmp_path / "no-driver")
    plant(monkeypatch, PASSES)
    report = doctor.diagnose(tmp_path / "missing.gguf")
    assert all(c.name != "GPU" for c in report.checks)
