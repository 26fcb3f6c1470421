"""The checks behind `edgespec doctor`: each says pass, fail or skip, why, and what to do.

No check may raise: one that cannot run says why and counts as failed or skipped.
"""

from __future__ import annotations

import platform
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from edgespec.buildcheck import cpu, gpus, rebuild, smoke
from edgespec.models import files, find_local
from edgespec.models.registry import ModelSpec, PairSpec, load_registry
from edgespec.system import paths
from edgespec.version import __version__

Status = Literal["pass", "fail", "skip"]
AMX_UPSTREAM = "ggml-org/llama.cpp PR #26954"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]
    info: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks], **self.info}


class _Doctor:
    """Runs the checks in order; later ones use what earlier ones found."""

    def __init__(
        self, pair: PairSpec | None, smoke_model: Path | None, gpu_layers: int | None = None
    ) -> None:
        self.pair = pair
        self.smoke_model = smoke_model
        self.gpu_layers = gpu_layers
        self.checks: list[Check] = []
        self.info: dict[str, Any] = {}
        self.library_loads = False
        self.compiled: frozenset[str] = frozenset()
        self.on_disk: dict[str, Path] = {}

    def run(self, step: Callable[[], Check | None], name: str) -> None:
        try:
            found = step()
        except Exception as exc:  # a doctor that crashes cannot diagnose anything
            found = Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}")
        if found is not None:
            self.checks.append(found)

    def versions(self) -> Check:
        lcp = rebuild.llama_cpp_python_version()
        self.info["versions"] = versions = {
            "python": platform.python_version(),
            "edgespec": __version__,
            "llama-cpp-python": lcp,
            "llama.cpp": "unknown",
        }
        if lcp == "not installed":
            return Check(
                "installation",
                "fail",
                "llama-cpp-python is not installed",
                rebuild.reinstall_command(),
            )
        try:
            from edgespec.llamacpp import backend
        except Exception as exc:  # a library that does not even load
            return Check(
                "installation",
                "fail",
                f"llama_cpp does not import: {exc}",
                rebuild.reinstall_command(),
            )
        self.library_loads = True
        versions["llama.cpp"] = backend.ggml_version()
        self.compiled = cpu.compiled_features(backend.system_info())
        return Check(
            "installation",
            "pass",
            " · ".join(f"{k} {v}" for k, v in versions.items()),
        )

    def backend(self) -> Check | None:
        if not self.library_loads:
            return None
        from edgespec.llamacpp import backend
        from edgespec.system.device import backend_name

        offload = backend.supports_gpu_offload()
        name = backend_name(offload, backend.system_info())
        self.info["backend"] = {"name": name, "gpu_offload": offload}
        detail = f"{name.upper()}, GPU offload works" if offload else "CPU (no GPU offload)"
        return Check("backend", "pass", detail)

    def unused_gpu(self) -> Check | None:
        """A CPU build (what a plain install gives) where the machine has an NVIDIA GPU."""
        if not self.library_loads or self.info.get("backend", {}).get("gpu_offload", True):
            return None
        found = list(dict.fromkeys(gpus.nvidia_gpus()))
        if not found:
            return None
        toolkit = "" if shutil.which("nvcc") else "; the rebuild needs CUDA's nvcc, not on PATH"
        return Check(
            "GPU",
            "fail",
            f"this machine has {', '.join(found)}, which this CPU build of llama.cpp cannot "
            f"use: it decodes on the CPU alone{toolkit}",
            rebuild.reinstall_command(rebuild.with_cuda(rebuild.recorded_flags())),
        )

    def instruction_sets(self) -> Check | None:
        if not self.library_loads:
            return None
        found = cpu.detect()
        mismatches = cpu.compare(self.compiled, found)
        self.info["cpu"] = {
            "compiled_for": sorted(self.compiled),
            "cpu_has": sorted(found.cpu),
            "os_enables": sorted(found.os_enabled),
            "source": found.source,
            "notes": list(found.notes),
            "mismatches": [asdict(m) for m in mismatches],
        }
        compiled = ", ".join(sorted(self.compiled)) or "no optional instruction sets"
        if not found.known:
            return Check(
                "instruction sets",
                "skip",
                f"built for {compiled}; this machine's were not read: {found.source}",
            )
        if mismatches:
            named = "; ".join(f"built with {m.feature}, {m.problem}" for m in mismatches)
            return Check("instruction sets", "fail", named, rebuild.reinstall_command())
        return Check(
            "instruction sets", "pass", f"built for {compiled}; all enabled here ({found.source})"
        )

    def amx(self) -> Check | None:
        # AMX is an x86-64 extension; nothing to leave out elsewhere.
        if not self.library_loads or platform.machine().lower() not in ("x86_64", "amd64"):
            return None
        if "AMX_INT8" in self.compiled:
            return Check(
                "AMX kernels",
                "fail",
                f"llama.cpp was built with its AMX kernels, which crash with this version "
                f"({AMX_UPSTREAM})",
                rebuild.reinstall_command(),
            )
        return Check("AMX kernels", "pass", "left out of the build (they crash in this llama.cpp)")

    def model(self, role: str, spec: ModelSpec) -> Check:
        name = f"{role} model"
        # find_local verifies what it finds; a file that fails is not found, and says why.
        notes = files.Notes()
        local = find_local(spec, notes)
        if local is None and notes.lines:
            # A model made here is made again by pull; a download must go first.
            fix = "edgespec pull" if spec.derive is not None else "delete it and run edgespec pull"
            return Check(name, "fail", notes.lines[0], fix)
        if local is None:
            return Check(name, "skip", f"{spec.name} is not on disk yet", "edgespec pull")
        self.on_disk[role] = local.path
        if spec.derive is not None:
            how = f"made here from {spec.derive.source.name}, unchanged since"
        else:
            how = "sha256 verified" if spec.sha256 else "the registry has no sha256 to verify"
        return Check(name, "pass", f"{local.path} ({how})")

    def smoke_test(self) -> Check | None:
        if not self.library_loads:
            return None
        model = self.smoke_model
        if model is None:
            if not self.on_disk:
                return Check(
                    "test decode",
                    "skip",
                    "no model on disk to test with",
                    "edgespec pull, or edgespec doctor --model FILE.gguf",
                )
            model = min(self.on_disk.values(), key=lambda p: p.stat().st_size)
        # The layers a run would put on the GPU: what was asked, else all where the build
        # offloads (as the plan does).
        offload = bool(self.info.get("backend", {}).get("gpu_offload"))
        layers = (-1 if self.gpu_layers is None else self.gpu_layers) if offload else 0
        result = smoke.test_now(model, gpu_layers=layers)
        if result.ok:
            return Check("test decode", "pass", f"{result.diagnosis()}, in a child process")
        detail = result.diagnosis()
        if result.signal is not None and layers != 0:
            # Is the GPU part to blame? The same decode on the CPU tells.
            cpu_only = smoke.test_now(model, gpu_layers=0)
            detail += (
                "; on the CPU alone (--gpu-layers 0) the test decode passes"
                if cpu_only.ok
                else f"; on the CPU alone it fails too: {cpu_only.diagnosis()}"
            )
        return Check("test decode", "fail", detail, result.fix())

    def calibration(self) -> Check | None:
        if not self.library_loads or self.pair is None:
            return None
        if "target" not in self.on_disk:
            return Check("calibration", "skip", "the target model is not on disk yet")
        from edgespec.planner.make import calibration_for

        cached = calibration_for(self.on_disk["target"], self.on_disk.get("draft"))
        if cached is None:
            return Check(
                "calibration",
                "skip",
                "not measured yet: the first `edgespec run` measures this device once",
            )
        return Check(
            "calibration", "pass", f"cached: target step {cached.target_step_s * 1000:.0f} ms"
        )

    def disk(self) -> Check:
        where = paths.models_dir()
        probe = where
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        pair = self.pair
        roles = {} if pair is None else {"target": pair.target, "draft": pair.draft}
        need = sum(s.size or 0 for r, s in roles.items() if r not in self.on_disk)
        detail = f"{free / 1e9:.1f} GB free in {probe}"
        if need > free:
            return Check(
                "disk space",
                "fail",
                f"{detail}; the default pair needs {need / 1e9:.1f} GB more",
                "free disk space or set EDGESPEC_HOME to a larger disk",
            )
        if need:
            detail += f" ({need / 1e9:.1f} GB needed for the default pair)"
        return Check("disk space", "pass", detail)

    def hub_reachable(self) -> Check:
        endpoint = files.endpoint()
        try:
            files.check_reachable(endpoint)
        except Exception as exc:
            if len(self.on_disk) == 2:
                return Check("model hub", "skip", f"{exc}; the default pair is on disk")
            if self.pair is not None and self.pair.target.mirror is not None:
                where = "comes from the package-index mirror"
                return Check("model hub", "skip", f"{exc}; the default pair {where}")
            return Check("model hub", "fail", str(exc), "check the network or use --offline")
        return Check("model hub", "pass", f"{endpoint} answers")


def diagnose(smoke_model: Path | None = None, gpu_layers: int | None = None) -> Report:
    """Every check; the test decode puts `gpu_layers` on the GPU (default: all, where the build
    offloads)."""
    try:
        pair: PairSpec | None = load_registry().default_pair
    except Exception:
        pair = None
    doc = _Doctor(pair, smoke_model, gpu_layers)
    doc.run(doc.versions, "installation")
    doc.run(doc.backend, "backend")
    doc.run(doc.unused_gpu, "GPU")
    doc.run(doc.instruction_sets, "instruction sets")
    doc.run(doc.amx, "AMX kernels")
    if pair is None:
        doc.checks.append(Check("models", "skip", "no default pair in the registry"))
    else:
        for role, spec in (("target", pair.target), ("draft", pair.draft)):
            doc.run(partial(doc.model, role, spec), f"{role} model")
    doc.run(doc.smoke_test, "test decode")
    doc.run(doc.calibration, "calibration")
    doc.run(doc.disk, "disk space")
    doc.run(doc.hub_reachable, "model hub")
    doc.info["platform"] = f"{platform.system()} {platform.machine()} · {sys.executable}"
    return Report(tuple(doc.checks), doc.info)
