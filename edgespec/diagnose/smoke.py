"""A crash-safe test of the llama.cpp build: load a model and decode in a child process.

A build compiled for instructions this machine does not run (llama.cpp's AMX kernels on Intel
CPUs, AVX-512 where the OS does not enable it) dies with SIGILL on its first batched decode,
killing the whole process without a word. The child takes that hit instead, and its verdict is
cached per library build, so each build pays for one few-second run.

`python -m edgespec.diagnose.smoke MODEL.gguf` is the child.
"""

from __future__ import annotations

import hashlib
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from edgespec import cachefile, paths
from edgespec.children import module_command
from edgespec.errors import EdgespecError

TIMEOUT_S = 180.0
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# A short text whose tokens make a batch of 8 and then one more.
_TEXT = "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n"


class LibraryCrashError(EdgespecError):
    """The llama.cpp library failed its smoke test on this machine."""


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    model: str
    seconds: float
    signal: str | None = None  # e.g. "SIGILL" when the child was killed by one
    detail: str = ""
    cached: bool = False

    def diagnosis(self) -> str:
        """One line: what crashed, why that is likely, what to do."""
        if self.ok:
            return f"llama.cpp decoded a batch of 8 tokens, then 1 ({self.seconds:.1f} s)"
        if self.signal == "SIGILL":
            what = (
                "llama.cpp died with SIGILL (illegal instruction) in a test decode: it was "
                "compiled for instructions this machine does not run (on Intel CPUs with AMX, "
                "its AMX kernels)"
            )
        elif self.signal is not None:
            what = f"llama.cpp died with {self.signal} in a test decode"
        else:
            what = f"llama.cpp failed a test decode: {self.detail}"
        return f"{what}. Reinstall it: {reinstall_command()}; `edgespec doctor` says more"


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


def llama_cpp_python_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return "not installed"


def reinstall_command() -> str:
    """The exact command that rebuilds llama-cpp-python without the crashing kernels."""
    flags = ""
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags = f'CFLAGS="{NO_AMX_FLAGS}" CXXFLAGS="{NO_AMX_FLAGS}" '
    return (
        f'CMAKE_ARGS="-DLLAVA_BUILD=OFF" {flags}{sys.executable} -m pip install '
        f"--force-reinstall --no-cache-dir --no-deps "
        f"llama-cpp-python=={llama_cpp_python_version()}"
    )


def child_command(model: Path) -> list[str]:
    return module_command("edgespec.diagnose.smoke", str(model))


def run(model: Path, timeout: float = TIMEOUT_S) -> SmokeResult:
    """Run the smoke test in a child process and read its fate."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            child_command(model),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return SmokeResult(False, str(model), timeout, None, f"no answer in {timeout:.0f} s")
    except OSError as exc:
        return SmokeResult(False, str(model), 0.0, None, f"could not start: {exc}")
    seconds = time.perf_counter() - start
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return SmokeResult(False, str(model), seconds, name)
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        detail = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        return SmokeResult(False, str(model), seconds, None, detail)
    return SmokeResult(True, str(model), seconds)


def _verdict_path() -> Path:
    return paths.home() / "checks" / f"llama-{library_key()}.json"


def cached_verdict() -> SmokeResult | None:
    """A passed smoke test of this very build, if one was recorded."""
    doc = cachefile.read(_verdict_path())
    if isinstance(doc, dict) and doc.get("ok") is True and isinstance(doc.get("seconds"), float):
        return SmokeResult(True, str(doc.get("model", "")), doc["seconds"], cached=True)
    return None


def remember(result: SmokeResult) -> None:
    """Keep a pass (never a failure: a rebuilt or repaired library is tested again). An
    unwritable cache only means the test runs again next time."""
    cachefile.write(_verdict_path(), {"ok": True, "model": result.model, "seconds": result.seconds})


def test_now(model: Path, timeout: float = TIMEOUT_S) -> SmokeResult:
    """A fresh smoke test, remembered when it passes."""
    result = run(model, timeout)
    if result.ok:
        remember(result)
    return result


def check(
    model: Path, note: Callable[[str], None] | None = None, timeout: float = TIMEOUT_S
) -> SmokeResult:
    """The cached verdict for this build, or a fresh smoke test (saying so through `note`)."""
    cached = cached_verdict()
    if cached is not None:
        return cached
    if note is not None:
        note("testing this llama.cpp build in a child process (once per build)")
    return test_now(model, timeout)


def ensure_works(model: Path, note: Callable[[str], None] | None = None) -> None:
    """Before a command loads models: one clear error instead of a bare crash.

    Only a crash stops the command; an ordinary failure (a broken file, too little memory)
    is left to the real load, which says what is wrong in its own words.
    """
    result = check(model, note)
    if result.signal is not None:
        raise LibraryCrashError(result.diagnosis())


def _child(model: str) -> None:
    import numpy as np

    from edgespec.llamacpp import LlamaModel, LoadOptions

    llm = LlamaModel(model, LoadOptions(n_ctx=256))
    tokens = (llm.tokenize(_TEXT, add_special=False) * 9)[:9]
    batch = llm.decode(tokens[:8], n_logits=8)
    single = llm.decode(tokens[8:], n_logits=1)
    if not (np.isfinite(batch).all() and np.isfinite(single).all()):
        raise SystemExit("the test decode produced non-finite logits")
    llm.close()
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m edgespec.diagnose.smoke MODEL.gguf")
    _child(sys.argv[1])
