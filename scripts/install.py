"""Set up edgespec in a virtual environment (.venv at the repository root), building llama.cpp
(through llama-cpp-python) so that it cannot crash on the machine it was built on.

    scripts/install.sh [--dev]          macOS, Linux (runs this file with python3)
    py -3 scripts\\install.py [--dev]    Windows

--dev also installs what the tests need, and llama.cpp's RPC server (not on Windows: its build
script needs sh). --venv DIR puts the environment elsewhere.

Everything that can refuse is checked before anything is built, one line each, naming the fix
(scripts/install_checks.py): the Python (3.10 or newer, on Apple Silicon an arm64 one, not x86_64
under Rosetta, which would build an x86 llama.cpp, and not a 32-bit ARM one), a .venv made
earlier by such a Python, a C/C++ compiler, and for CUDA its nvcc and, on Windows, Visual
Studio's CUDA integration and long paths.

Why a script and not a bare `pip install`:
- llama-cpp-python compiles llama.cpp with -march=native. On x86-64 CPUs that report Intel AMX,
  the vendored llama.cpp then compiles its AMX tile kernels, which die with "Illegal instruction"
  on the first batched decode (ggml-org/llama.cpp PR #26954: the tile configuration lives on the
  stack and is optimised away, and XTILEDATA permission is asked for on the main thread only). We
  keep every other native instruction set and leave AMX out. EDGESPEC_ALLOW_AMX=1 builds with AMX
  again, once a fixed llama.cpp is vendored.
- pip caches a built wheel by its source URL alone, never by the compiler flags, so a wheel built
  with other flags would be reused silently. We keep llama-cpp-python's wheel in a cache of our own
  whose key includes the flags.

llama.cpp is built with its RPC backend (-DGGML_RPC=ON), so that `--rpc` can put the target's
layers on other machines. Extra CMake options go in CMAKE_ARGS as usual, and are kept: CUDA is
CMAKE_ARGS="-DGGML_CUDA=on" ($env:CMAKE_ARGS="-DGGML_CUDA=on" in PowerShell). Metal needs none:
llama-cpp-python 0.3.36's CMakeLists.txt sets GGML_METAL ON (CACHE FORCE) on every Apple build,
and the vendored ggml defaults it ON there too.

The flags a wheel was built with are recorded in the environment (edgespec-build.json), so that
`edgespec doctor` can repeat them when it advises a rebuild.

This file must run its Python version check on Python 3.6-3.9 too (macOS's /usr/bin/python3 is
3.9): nothing before that check may use newer syntax or evaluate newer annotations.
"""

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

MIN_PYTHON = (3, 10)


def python_problem(version: tuple, executable: str, windows: bool) -> str:
    """Why this Python cannot install edgespec ("" if it can)."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return ""
    found = ".".join(str(part) for part in version[:3])
    run = "py -3.12 scripts\\install.py" if windows else "PYTHON=python3.12 scripts/install.sh"
    return (
        f"install: Python {found} ({executable}) is too old: edgespec needs Python 3.10 or newer;"
        f" install one (python.org, Homebrew, or the system's packages) and run: {run}"
    )


# Before anything below: its annotations are evaluated when the module runs, and need 3.10.
if __name__ == "__main__" and sys.version_info < MIN_PYTHON:
    sys.exit(python_problem(tuple(sys.version_info), sys.executable, os.name == "nt"))

# The checks, in a module that needs 3.10 too.
from install_checks import (  # noqa: E402
    VENV_PACKAGE,
    Command,
    Found,
    command_output,
    compiler_problem,
    compilers,
    cuda_asked,
    cuda_problems,
    probe,
    rosetta_problem,
    userland_problem,
    venv_problem,
    venv_python,
    windows_words,
)

# What the installer adds to the user's flags (see the module's docstring).
OWN_CMAKE_ARGS = "-DLLAVA_BUILD=OFF -DGGML_RPC=ON"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# Memory for one compile job. The build runs no more jobs than fit in the memory available, so
# that a 2-4 GB Raspberry Pi does not swap or kill the compiler (ninja's default is CPUs + 2).
# Measured: llama-cpp-python 0.3.36's 129 compile commands, one at a time with /usr/bin/time -f
# %M as the compiler launcher (GCC 12, x86-64): at most 663 MiB (vendor/cpp-httplib/httplib.cpp;
# common/arg.cpp 585 MiB), 234 MiB on average. 1 GiB leaves room for arm64, another compiler and
# the linker, which were not measured.
JOB_MEMORY = 1 << 30
# A CUDA job: nvcc compiles ggml's template-heavy kernels for each architecture; a guess, far
# above the CPU's (benchmarks/gpu/check.sh measures the CUDA build's jobs on a lent GPU).
CUDA_JOB_MEMORY = 4 << 30
RECORD = "edgespec-build.json"


class Flags(NamedTuple):
    """The flags llama-cpp-python's wheel is built with, and the user's own part of them (for
    llama.cpp's programs, whose build script adds what it needs itself)."""

    cmake_args: str
    cflags: str
    cxxflags: str
    user_cmake_args: str
    user_cflags: str
    user_cxxflags: str
    amx_refused: bool
    notes: tuple[str, ...]


def accepts(compiler: Command, flags: str, suffix: str) -> bool:
    """Whether the compiler builds an empty file with these flags."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / f"empty{suffix}"
        source.write_text("int edgespec_empty;\n")
        command = [
            *compiler,
            *flags.split(),
            "-c",
            str(source),
            "-o",
            str(Path(folder) / "empty.o"),
        ]
        return command_output(command) is not None


def without(words: str, unwanted: str) -> list[str]:
    return [word for word in words.split() if word not in unwanted.split()]


def build_flags(
    env: Mapping[str, str], machine: str, windows: bool, accepted: Callable[[str], bool]
) -> Flags:
    """The flags of the build: the user's, with the installer's own added once (so that flags read
    back from edgespec-build.json build the same wheel), in the form the cache's keys were made
    from. accepted("CC") / accepted("CXX") say whether that compiler takes NO_AMX."""
    user = {name: env.get(name, "") for name in ("CMAKE_ARGS", "CFLAGS", "CXXFLAGS")}
    if windows:
        # Quoted as scikit-build-core splits CMAKE_ARGS (POSIX): a backslash stays a path's.
        words = windows_words(user["CMAKE_ARGS"])
        user_cmake = shlex.join(w for w in words if w not in OWN_CMAKE_ARGS.split())
    else:
        user_cmake = " ".join(without(user["CMAKE_ARGS"], OWN_CMAKE_ARGS))
    user_c = {name: " ".join(without(user[name], NO_AMX)) for name in ("CFLAGS", "CXXFLAGS")}
    cmake_args = f"{OWN_CMAKE_ARGS} {user_cmake}"
    # MSVC has no -march=native: ggml builds AMX kernels there only when GGML_AMX_* is set (off
    # by default), and cl does not take GCC's flags.
    x86 = machine.lower() in ("x86_64", "amd64") and not windows
    if not x86 or env.get("EDGESPEC_ALLOW_AMX") == "1":
        own = {name: " ".join(user[name].split()) for name in user_c}
        return Flags(
            cmake_args,
            own["CFLAGS"],
            own["CXXFLAGS"],
            user_cmake,
            user_c["CFLAGS"],
            user_c["CXXFLAGS"],
            False,
            (),
        )
    flags, notes = {}, []
    for name, compiler in (("CFLAGS", "CC"), ("CXXFLAGS", "CXX")):
        if accepted(compiler):
            flags[name] = f"{user_c[name]} {NO_AMX}"
        else:
            # GCC and Clang learnt AMX in version 11. ggml compiles its AMX kernels only where the
            # compiler defines __AMX_INT8__ (-march=native on an AMX CPU), which an older one
            # never does: there is nothing to leave out.
            flags[name] = user_c[name]
            notes.append(
                f"install: note: the {compiler} compiler refuses {NO_AMX} (older than GCC or"
                " Clang 11): building without them; such a compiler builds no AMX kernels"
            )
    return Flags(
        cmake_args,
        flags["CFLAGS"],
        flags["CXXFLAGS"],
        user_cmake,
        user_c["CFLAGS"],
        user_c["CXXFLAGS"],
        bool(notes),
        tuple(notes),
    )


def native_flags(env: Mapping[str, str], machine: str, windows: bool) -> Flags:
    """build_flags, with this machine's compilers asked whether they take NO_AMX (only asked on
    x86-64, where it matters)."""
    found = dict(zip(("CC", "CXX"), compilers(env), strict=True))

    def accepted(name: str) -> bool:
        compiler = found[name]
        return compiler is not None and accepts(compiler, NO_AMX, ".c" if name == "CC" else ".cpp")

    return build_flags(env, machine, windows, accepted)


def cache_key(version: str, machine: str, tag: str, flags: Flags) -> str:
    """The wheel cache's key: the same bytes the shell installer hashed before this one
    (printf '%s\\n' of each), so that wheels it built are found."""
    parts = (version, machine, tag, flags.cmake_args, flags.cflags, flags.cxxflags)
    return hashlib.sha256("".join(f"{part}\n" for part in parts).encode()).hexdigest()[:16]


def wheel_cache(env: Mapping[str, str]) -> Path:
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(env.get("EDGESPEC_WHEELS") or Path(cache) / "edgespec" / "wheels")


def available_memory() -> int | None:
    """Bytes of memory a build can use now (the total where the system says no more)."""
    try:
        if sys.platform == "win32":
            return windows_available_memory()
        meminfo = Path("/proc/meminfo")
        if meminfo.exists():
            for line in meminfo.read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def windows_available_memory() -> int:
    import ctypes

    class Status(ctypes.Structure):
        _fields_ = [  # GlobalMemoryStatusEx's MEMORYSTATUSEX
            ("length", ctypes.c_ulong),
            ("load", ctypes.c_ulong),
            ("total", ctypes.c_ulonglong),
            ("available", ctypes.c_ulonglong),
            ("page_total", ctypes.c_ulonglong),
            ("page_available", ctypes.c_ulonglong),
            ("virtual_total", ctypes.c_ulonglong),
            ("virtual_available", ctypes.c_ulonglong),
            ("extended", ctypes.c_ulonglong),
        ]

    status = Status()
    status.length = ctypes.sizeof(Status)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        raise OSError("GlobalMemoryStatusEx failed")
    return int(status.available)


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def build_jobs(cpus: int, memory: int | None, job_memory: int = JOB_MEMORY) -> int:
    """Compile jobs: one a CPU, no more than fit in memory, at least one."""
    fit = cpus if memory is None else memory // job_memory
    return max(1, min(cpus, fit))


def job_memory(cmake_args: str) -> int:
    """What one compile job of a build with these CMake options may take."""
    return CUDA_JOB_MEMORY if cuda_asked(shlex.split(cmake_args)) else JOB_MEMORY


def build_environment(**values: str) -> dict[str, str]:
    """This environment with `values`, less SOURCE_DATE_EPOCH: ggml's CMake builds for any CPU
    where it is set (GGML_NATIVE off, for reproducible packages), and this build is for this
    one (-DGGML_NATIVE=OFF in CMAKE_ARGS still asks for a portable one)."""
    env = {name: value for name, value in os.environ.items() if name != "SOURCE_DATE_EPOCH"}
    env.update(values)
    return env


def build_record(version: str, flags: Flags, machine: str, python: Found) -> dict[str, str]:
    """What edgespec-build.json holds: how the installed llama.cpp was built, for doctor's
    advice to rebuild it the same way."""
    return {
        "llama_cpp_python": version,
        "cmake_args": flags.cmake_args.strip(),
        "cflags": flags.cflags.strip(),
        "cxxflags": flags.cxxflags.strip(),
        "machine": machine,
        "python": ".".join(map(str, python.version)),
    }


def pinned_version(root: Path) -> str:
    for line in (root / "pyproject.toml").read_text().splitlines():
        if '"llama-cpp-python==' in line:
            return line.split("==", 1)[1].split('"', 1)[0]
    return ""


def checks(venv: Path, windows: bool) -> list[str]:
    """Everything that can refuse, before anything is made or built."""
    machine = platform.machine()
    problems = [
        python_problem(tuple(sys.version_info), sys.executable, windows),
        rosetta_problem(sys.platform, machine),
    ]
    if venv.exists():
        found = probe(venv_python(venv, windows))
        rosetta = found is not None and bool(rosetta_problem(sys.platform, found.machine))
        problems.append(venv_problem(venv, found, windows, rosetta))
    problems.append(userland_problem(machine, struct.calcsize("P") * 8))
    problems.append(compiler_problem(sys.platform, machine, os.environ))
    problems += cuda_problems(os.environ, windows)
    return [problem for problem in dict.fromkeys(problems) if problem]


def run(command: Command, cwd: Path, env: Mapping[str, str] | None = None) -> None:
    subprocess.run(command, cwd=cwd, env=env, check=True)


def build_wheel(python: Path, version: str, flags: Flags, wheels: Path, root: Path) -> None:
    env = build_environment(
        CMAKE_ARGS=flags.cmake_args, CFLAGS=flags.cflags, CXXFLAGS=flags.cxxflags
    )
    cpus, memory, each = cpu_count(), available_memory(), job_memory(flags.cmake_args)
    if "CMAKE_BUILD_PARALLEL_LEVEL" not in env:
        # An environment variable only: the cache key leaves it out, as the wheel is the same.
        jobs = build_jobs(cpus, memory, each)
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
        if jobs < cpus and memory is not None:
            print(
                f"install: note: {jobs} compile job(s) for {cpus} CPUs, as {memory >> 20} MiB"
                f" of memory is available and a job can take {each >> 20} MiB",
                file=sys.stderr,
            )
    print(
        f"Building llama.cpp (llama-cpp-python {version}; several minutes the first time)\n"
        f"  CMAKE_ARGS={flags.cmake_args} CFLAGS={flags.cflags} CXXFLAGS={flags.cxxflags}",
        file=sys.stderr,
    )
    part = wheels.with_name(wheels.name + ".part")
    part.mkdir(parents=True, exist_ok=True)
    source = f"llama-cpp-python=={version}"
    no_binary = ["--no-binary", "llama-cpp-python"]
    wheel = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", *no_binary]
    run([*wheel, "-w", str(part), source], root, env)
    shutil.rmtree(wheels, ignore_errors=True)
    part.rename(wheels)


def build_tools(flags: Flags, root: Path) -> None:
    """llama.cpp's RPC server, for the tests' `--rpc` on loopback, from the same llama.cpp."""
    env = build_environment(
        CMAKE_ARGS=flags.user_cmake_args, CFLAGS=flags.user_cflags, CXXFLAGS=flags.user_cxxflags
    )
    if flags.amx_refused:
        env["EDGESPEC_ALLOW_AMX"] = "1"  # its compiler refuses the flags; it builds no AMX
    if "CMAKE_BUILD_PARALLEL_LEVEL" not in env:
        each = job_memory(flags.cmake_args)
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(build_jobs(cpu_count(), available_memory(), each))
    script = root / "scripts" / "build_llama_tools.sh"
    subprocess.run(
        ["sh", str(script), "ggml-rpc-server"],
        cwd=root,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def install(venv: Path, dev: bool, windows: bool, root: Path) -> None:
    version = pinned_version(root)
    if not version:
        raise SystemExit("install: no llama-cpp-python==VERSION in pyproject.toml")
    if not venv.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], cwd=root, check=False)
        if made.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)  # half made, it would be reused without pip
            raise SystemExit(
                f"install: {sys.executable} could not make a virtual environment:"
                f" {VENV_PACKAGE}, then run the installer again"
            )
    python = venv_python(venv, windows)
    found = probe(python)
    if found is None:
        raise SystemExit(f"install: the Python of {venv} does not run")
    machine = platform.machine()
    flags = native_flags(os.environ, machine, windows)
    for note in flags.notes:
        print(note, file=sys.stderr)
    if "SOURCE_DATE_EPOCH" in os.environ:
        print(
            "install: note: SOURCE_DATE_EPOCH is set, with which llama.cpp builds for any CPU;"
            " building without it, for this one (-DGGML_NATIVE=OFF in CMAKE_ARGS builds for any)",
            file=sys.stderr,
        )
    wheels = wheel_cache(os.environ) / cache_key(version, machine, found.tag, flags)
    pattern = f"llama_cpp_python-{version}-*.whl"
    if not any(wheels.glob(pattern)):
        build_wheel(python, version, flags, wheels, root)
    pip = [str(python), "-m", "pip"]
    run(
        [
            *pip,
            "install",
            "--upgrade",
            "--force-reinstall",
            "--no-deps",
            *map(str, wheels.glob(pattern)),
        ],
        root,
    )
    record = build_record(version, flags, machine, found)
    (venv / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    run([*pip, "install", "-e", ".[dev]" if dev else "."], root)
    if dev and windows:
        print(
            "install: note: llama.cpp's RPC server is not built on Windows (its build script"
            " needs sh); the tests that start it need EDGESPEC_RPC_SERVER",
            file=sys.stderr,
        )
    elif dev:
        build_tools(flags, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="install", description="Set up edgespec in a virtual environment."
    )
    parser.add_argument("--dev", action="store_true", help="also what the tests need")
    parser.add_argument("--venv", type=Path, help="where the environment goes (default: .venv)")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    venv = (args.venv or root / ".venv").absolute()
    windows = os.name == "nt"
    problems = checks(venv, windows)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    try:
        install(venv, args.dev, windows, root)
    except subprocess.CalledProcessError as error:
        print(
            f"install: {shlex.join(map(str, error.cmd))} failed (exit {error.returncode})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
