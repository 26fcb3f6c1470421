"""How llama.cpp was built here (the installer's record, `edgespec-build.json` in `sys.prefix`)
and the command that builds it again with the same flags: without them a CUDA build would come
back as a CPU one, or lose `--rpc`."""

from __future__ import annotations

import json
import platform
import shlex
import sys
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

RECORD = "edgespec-build.json"
# The installer's own options, always given (scripts/install.sh adds them itself).
OWN_CMAKE_ARGS = ("-DLLAVA_BUILD=OFF", "-DGGML_RPC=ON")
NO_AMX_FLAGS = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
CUDA_ARCHITECTURES = "-DCMAKE_CUDA_ARCHITECTURES"


@dataclass(frozen=True)
class BuildFlags:
    """The user's own flags, without those the installer adds itself."""

    cmake_args: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ()
    cxxflags: tuple[str, ...] = ()

    @property
    def backend(self) -> str | None:
        """The GPU backend the CMake options switch on (GGML_CUDA=on: "CUDA"), if any."""
        for arg in self.cmake_args:
            name, _, value = arg.partition("=")
            if name.upper().startswith("-DGGML_") and value.upper() in ("ON", "1", "TRUE"):
                backend = name[len("-DGGML_") :].upper()
                if backend in ("CUDA", "METAL", "HIP", "VULKAN", "SYCL", "MUSA"):
                    return backend
        return None


def _split(value: object) -> tuple[str, ...]:
    """Words as scikit-build-core splits CMAKE_ARGS; on Windows a backslash outside quotes is a
    path's (a record of what was typed there: C:\\CUDA\\v12.4, not escapes)."""
    if not isinstance(value, str):
        return ()
    if sys.platform != "win32":
        return tuple(shlex.split(value))
    lexer = shlex.shlex(value, posix=True)
    lexer.whitespace_split, lexer.commenters, lexer.escape = True, "", ""
    return tuple(lexer)


def recorded_flags(prefix: Path | None = None) -> BuildFlags:
    """The flags the installer recorded here; none without a readable record (`pip install`)."""
    path = Path(sys.prefix if prefix is None else prefix) / RECORD
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return BuildFlags()
    if not isinstance(doc, dict):
        return BuildFlags()
    own = {a.upper() for a in OWN_CMAKE_ARGS}
    try:
        cmake = [a for a in _split(doc.get("cmake_args")) if a.upper() not in own]
        cflags, cxxflags = (
            [f for f in _split(doc.get(key)) if f not in NO_AMX_FLAGS]
            for key in ("cflags", "cxxflags")
        )
    except ValueError:  # unbalanced quotes: not the installer's record
        return BuildFlags()
    return BuildFlags(tuple(cmake), tuple(cflags), tuple(cxxflags))


def for_this_gpu(flags: BuildFlags) -> BuildFlags:
    """The flags with CUDA's architecture set to this machine's card (`native`: CMake 3.24+)."""
    if flags.backend != "CUDA":
        return flags
    kept = [a for a in flags.cmake_args if not a.upper().startswith(CUDA_ARCHITECTURES)]
    return replace(flags, cmake_args=(*kept, f"{CUDA_ARCHITECTURES}=native"))


def with_cuda(flags: BuildFlags) -> BuildFlags:
    """The flags with CUDA switched on, for this machine's card."""
    kept = tuple(a for a in flags.cmake_args if not a.upper().startswith("-DGGML_CUDA="))
    return for_this_gpu(replace(flags, cmake_args=(*kept, "-DGGML_CUDA=on")))


def llama_cpp_python_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return "not installed"


def checkout() -> Path | None:
    """The repository whose `scripts/install.sh` made this environment (its `.venv`), if any."""
    root = Path(__file__).resolve().parents[2]
    script = root / "scripts" / "install.sh"
    try:
        venv = (root / ".venv").resolve()
        made_here = script.is_file() and venv == Path(sys.prefix).resolve()
    except OSError:
        return None
    return root if made_here else None


def reinstall_command(flags: BuildFlags | None = None) -> str:
    """The command that rebuilds llama-cpp-python with these flags (default: the recorded ones):
    a checkout's installer, else pip with the installer's own flags spelled out."""
    flags = recorded_flags() if flags is None else flags
    root = checkout()
    if root is not None and sys.platform != "win32":
        script = shlex.quote(str(root / "scripts" / "install.sh"))
        return _with_env(_environment(flags, installer=False), script)
    pip = (
        f"-m pip install --force-reinstall --no-cache-dir --no-deps "
        f"llama-cpp-python=={llama_cpp_python_version()}"
    )
    env = _environment(flags, installer=True)
    if sys.platform == "win32":  # PowerShell: no `NAME=value command`
        sets = "".join(f"$env:{k}='{_ps_quote(v)}'; " for k, v in env.items())
        return f"{sets}& '{_ps_quote(sys.executable)}' {pip}"
    return _with_env(env, f"{shlex.quote(sys.executable)} {pip}")


def _environment(flags: BuildFlags, installer: bool) -> dict[str, str]:
    """CMAKE_ARGS, CFLAGS and CXXFLAGS where not empty (with `installer`: its own flags too)."""
    cmake, cflags, cxxflags = flags.cmake_args, flags.cflags, flags.cxxflags
    if installer:
        cmake = (*OWN_CMAKE_ARGS, *cmake)
        # GCC's and Clang's flags: MSVC, Windows' compiler, takes none of them.
        if platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32":
            cflags, cxxflags = (*cflags, *NO_AMX_FLAGS), (*cxxflags, *NO_AMX_FLAGS)
    # CMake options are joined as a shell would split them (a value may hold a space).
    env = {"CMAKE_ARGS": shlex.join(cmake), "CFLAGS": " ".join(cflags)}
    env["CXXFLAGS"] = " ".join(cxxflags)
    return {k: v for k, v in env.items() if v}


def _with_env(env: dict[str, str], command: str) -> str:
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items()) + command


def _ps_quote(text: str) -> str:
    """Text inside PowerShell's single quotes, where a quote is written twice."""
    return text.replace("'", "''")
