"""A crash-safe test of the llama.cpp build: a child process (`python -m
edgespec.buildcheck.smoke MODEL.gguf [--gpu-layers N]`) loads a model and decodes, so that a
build for instructions or a GPU this machine lacks kills the child, not the command, without a
word. Verdicts are cached per build and GPU layer count."""

from __future__ import annotations

import argparse
import hashlib
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import util
from pathlib import Path

from edgespec.buildcheck import rebuild
from edgespec.errors import EdgespecError
from edgespec.system import cachefile, paths
from edgespec.system.children import module_command

TIMEOUT_S = 180.0
# A crashed process on Windows exits with its exception's NTSTATUS, not a negative signal:
WINDOWS_CRASHES = {
    0xC000001D: "STATUS_ILLEGAL_INSTRUCTION",
    0xC0000096: "STATUS_PRIVILEGED_INSTRUCTION",
    0xC0000005: "STATUS_ACCESS_VIOLATION",
    0xC0000006: "STATUS_IN_PAGE_ERROR",
    0xC0000094: "STATUS_INTEGER_DIVIDE_BY_ZERO",
    0xC00000FD: "STATUS_STACK_OVERFLOW",
    0xC0000374: "STATUS_HEAP_CORRUPTION",
    0xC0000409: "STATUS_STACK_BUFFER_OVERRUN",  # also abort() (GGML_ABORT): a fail-fast exit
    0x80000003: "STATUS_BREAKPOINT",
}
ILLEGAL_INSTRUCTION = frozenset({"SIGILL", "STATUS_ILLEGAL_INSTRUCTION"})
# A short text whose tokens make a batch of 8 and then one more.
_TEXT = "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n"


class LibraryCrashError(EdgespecError):
    """The llama.cpp library failed its smoke test on this machine."""


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    model: str
    seconds: float
    signal: str | None = None  # how the child crashed ("SIGILL"; Windows: "STATUS_...")
    detail: str = ""
    cached: bool = False
    gpu_layers: int = 0  # layers the test decode put on the GPU (-1: all)

    def diagnosis(self) -> str:
        """One line: what crashed, why that is likely, what to do."""
        if self.ok:
            return f"llama.cpp decoded a batch of 8 tokens, then 1 ({self.seconds:.1f} s)"
        if self.signal is not None and self.gpu_layers != 0:
            return _gpu_crash(self.signal, self.gpu_layers, self.fix())
        if self.signal in ILLEGAL_INSTRUCTION:
            what = (
                f"llama.cpp died with {self.signal} (illegal instruction) in a test decode: it "
                "was compiled for instructions this machine does not run (on Intel CPUs with "
                "AMX, its AMX kernels)"
            )
        elif self.signal is not None:
            what = f"llama.cpp died with {self.signal} in a test decode"
        else:
            what = f"llama.cpp failed a test decode: {self.detail}"
        return f"{what}. Reinstall it: {self.fix()}; `edgespec doctor` says more"

    def fix(self) -> str:
        """The command that rebuilds llama.cpp with its flags (after a GPU crash: for this GPU)."""
        flags = rebuild.recorded_flags()
        if self.signal is not None and self.gpu_layers != 0:
            flags = rebuild.for_this_gpu(flags)
        return rebuild.reinstall_command(flags)


def _gpu_crash(name: str, gpu_layers: int, fix: str) -> str:
    flags = rebuild.recorded_flags()
    layers = "all layers" if gpu_layers < 0 else f"{gpu_layers} layers"
    why = "its GPU kernels were probably built for another GPU"
    if flags.backend == "CUDA":
        why += (
            " (the CUDA architectures: `nvidia-smi --query-gpu=compute_cap --format=csv` names "
            f"this card's; {rebuild.CUDA_ARCHITECTURES}=native builds for it)"
        )
    return (
        f"llama.cpp died with {name} in a test decode with {layers} on the GPU: {why}. "
        f"Rebuild it for this GPU: {fix}; meanwhile `--gpu-layers 0` keeps the models off the "
        "GPU (`edgespec doctor --gpu-layers 0` tests that)"
    )


def crash_name(returncode: int, platform_name: str | None = None) -> str | None:
    """How a child that exited with `returncode` crashed, or None if it did not."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    if (platform_name or sys.platform) == "win32":
        if returncode in WINDOWS_CRASHES:
            return WINDOWS_CRASHES[returncode]
        if returncode >= 0xC0000000:  # any other error-severity exception status
            return f"exception 0x{returncode:08X}"
    return None


def library_dir() -> Path | None:
    """llama-cpp-python's folder of shared libraries, found without loading them."""
    spec = util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def library_key() -> str:
    """Names this exact build: every library file's path, size and modification time."""
    folder = library_dir()
    parts = [platform.machine(), platform.node()]
    if folder is not None and folder.is_dir():
        for f in sorted(folder.iterdir()):
            st = f.stat()
            parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def child_command(model: Path, gpu_layers: int = 0) -> list[str]:
    return module_command("edgespec.buildcheck.smoke", str(model), "--gpu-layers", str(gpu_layers))


def run(model: Path, gpu_layers: int = 0) -> SmokeResult:
    """Run the smoke test in a child process and read its fate."""
    failed = partial(SmokeResult, False, str(model), gpu_layers=gpu_layers)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            child_command(model, gpu_layers),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return failed(TIMEOUT_S, detail=f"no answer in {TIMEOUT_S:.0f} s")
    except OSError as exc:
        return failed(0.0, detail=f"could not start: {exc}")
    seconds = time.perf_counter() - start
    crashed = crash_name(proc.returncode)
    if crashed is not None:
        return failed(seconds, crashed)
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return failed(
            seconds, detail=lines[-1].strip() if lines else f"exit code {proc.returncode}"
        )
    return SmokeResult(True, str(model), seconds, gpu_layers=gpu_layers)


def _verdict_path(gpu_layers: int) -> Path:
    # A pass on the CPU says nothing of the GPU's kernels: a verdict per layer count.
    layers = f"-ngl{gpu_layers}" if gpu_layers != 0 else ""
    return paths.home() / "checks" / f"llama-{library_key()}{layers}.json"


def cached_verdict(gpu_layers: int = 0) -> SmokeResult | None:
    """A passed smoke test of this very build with this many GPU layers, if one was recorded."""
    doc = cachefile.read(_verdict_path(gpu_layers))
    if isinstance(doc, dict) and doc.get("ok") is True and isinstance(doc.get("seconds"), float):
        model, seconds = str(doc.get("model", "")), doc["seconds"]
        return SmokeResult(True, model, seconds, cached=True, gpu_layers=gpu_layers)
    return None


def test_now(model: Path, gpu_layers: int = 0) -> SmokeResult:
    """A fresh smoke test; a pass is remembered (never a failure: a rebuilt or repaired library
    is tested again)."""
    result = run(model, gpu_layers)
    if result.ok:
        doc = {"ok": True, "model": result.model, "seconds": result.seconds}
        cachefile.write(_verdict_path(gpu_layers), doc)
    return result


def ensure_works(
    model: Path, note: Callable[[str], None] | None = None, gpu_layers: int = 0
) -> None:
    """Before a command loads models (`gpu_layers` as the run will), unless this build passed
    before: a clear error instead of a bare crash (a fresh test is announced through `note`).
    Other failures are left to the real load, which says what is wrong."""
    if cached_verdict(gpu_layers) is not None:
        return
    if note is not None:
        where = "" if gpu_layers == 0 else " with its GPU"
        note(f"testing this llama.cpp build{where} in a child process (once per build)")
    result = test_now(model, gpu_layers=gpu_layers)
    if result.signal is not None:
        raise LibraryCrashError(result.diagnosis())


# SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX
WINDOWS_QUIET_ERRORS = 0x8003


def main() -> None:
    """The child: its arguments are `child_command`'s."""
    import numpy as np

    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    parser = argparse.ArgumentParser(prog="python -m edgespec.buildcheck.smoke")
    parser.add_argument("model")
    parser.add_argument("--gpu-layers", type=int, default=0)
    arguments = parser.parse_args()
    if sys.platform == "win32":
        # A crash ends the child at once, not held by Windows Error Reporting until the timeout.
        import ctypes

        ctypes.windll.kernel32.SetErrorMode(WINDOWS_QUIET_ERRORS)
    llm = LlamaModel(arguments.model, LoadOptions(n_ctx=256, n_gpu_layers=arguments.gpu_layers))
    tokens = (llm.tokenize(_TEXT, add_special=False) * 9)[:9]
    batch = llm.decode(tokens[:8], n_logits=8)
    single = llm.decode(tokens[8:], n_logits=1)
    if not (np.isfinite(batch).all() and np.isfinite(single).all()):
        raise SystemExit("the test decode produced non-finite logits")
    llm.close()
    print("ok")


if __name__ == "__main__":
    main()
