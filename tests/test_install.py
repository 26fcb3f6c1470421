"""The installer (scripts/install.py, run by scripts/install.sh): what can refuse is checked before
anything is made or built, one line naming the fix; the compiler is asked whether it takes the
flags that leave AMX out; compile jobs fit in memory; the wheel cache's keys are those the shell
installer made; the build's flags are recorded for doctor. Nothing here builds llama.cpp: the
environment's Python is a fake that records what pip was asked."""

from __future__ import annotations

import ast
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.script_module import load_script

install = load_script("install")
VERSION = install.pinned_version(ROOT)
GIB = 1 << 30


def old_pythons() -> list[Path]:
    """Pythons older than 3.10 on this machine (pyenv's, python3.N, the system's)."""
    names = [f"python3.{minor}" for minor in range(6, 10)] + ["python3"]
    found = [Path(p) for name in names if (p := shutil.which(name))]
    found += sorted(Path.home().glob(".pyenv/versions/3.[6-9].*/bin/python3"))
    found += [Path("/usr/bin/python3")]
    old = {}
    for python in found:
        try:
            answer = subprocess.run(
                [str(python), "-c", "import sys; print(sys.version_info < (3, 10))"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
        except OSError:
            continue
        if answer.strip() == "True":
            old.setdefault(python.resolve(), python)
    return list(old.values())


OLD_PYTHONS = old_pythons()
needs_old_python = pytest.mark.skipif(
    not OLD_PYTHONS, reason="no Python older than 3.10 on this machine to run the installer with"
)


def installer_copy(tmp_path: Path) -> Path:
    """The installer in a copy of the repository, so that its .venv is made there."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    scripts = ("install.sh", "install.py", "install_checks.py")
    for name in (*(f"scripts/{s}" for s in scripts), "pyproject.toml"):
        shutil.copy2(ROOT / name, repo / name)
    return repo


def offline(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment where pip can fetch nothing, so that an installer which went on to build
    (as the shell installer did) fails in seconds instead of building llama.cpp."""
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    env["EDGESPEC_WHEELS"] = str(tmp_path / "wheels")
    return {**env, **extra}


@needs_old_python
@pytest.mark.parametrize("old", OLD_PYTHONS, ids=str)
def test_an_old_python_stops_the_installer_before_it_makes_anything(
    old: Path, tmp_path: Path
) -> None:
    repo = installer_copy(tmp_path)
    proc = subprocess.run(
        ["sh", "scripts/install.sh"],
        cwd=repo,
        env=offline(tmp_path, PYTHON=str(old)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert not (repo / ".venv").exists()
    [line] = proc.stderr.splitlines()
    assert "is too old: edgespec needs Python 3.10 or newer" in line
    assert "PYTHON=python3.12 scripts/install.sh" in line


@needs_old_python
def test_a_venv_an_old_python_made_is_not_reused(tmp_path: Path) -> None:
    repo = installer_copy(tmp_path)
    subprocess.run([str(OLD_PYTHONS[-1]), "-m", "venv", "--without-pip", ".venv"], cwd=repo)
    proc = subprocess.run(
        ["sh", "scripts/install.sh"],
        cwd=repo,
        env=offline(tmp_path, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert "/.venv was made by Python 3." in line and "rm -rf" in line
    assert not (tmp_path / "wheels").exists()


def test_the_version_check_runs_on_python_3_6() -> None:
    """Where no old Python is at hand: the file parses as 3.6, and what runs before the check
    evaluates no annotation that needs 3.9 or later (a subscript or a `|`)."""
    tree = ast.parse((ROOT / "scripts" / "install.py").read_text(), feature_version=(3, 6))
    guard = next(i for i, node in enumerate(tree.body) if isinstance(node, ast.If))
    for node in tree.body[:guard]:
        assert not isinstance(node, ast.ImportFrom) or node.module != "__future__"
        if isinstance(node, ast.FunctionDef):
            annotations = [arg.annotation for arg in node.args.args] + [node.returns]
            assert all(isinstance(a, ast.Name) for a in annotations), node.name


@pytest.mark.parametrize(
    ("version", "windows", "fix"),
    [
        ((3, 9, 6), False, "PYTHON=python3.12 scripts/install.sh"),
        ((3, 8, 10), True, "py -3.12 scripts\\install.py"),
        ((3, 10, 0), False, None),
        ((3, 13, 1), True, None),
    ],
)
def test_the_python_check(version: tuple[int, ...], windows: bool, fix: str | None) -> None:
    problem = install.python_problem(version, "/usr/bin/python3", windows)
    if fix is None:
        assert problem == ""
    else:
        assert f"Python {'.'.join(map(str, version))} (/usr/bin/python3) is too old" in problem
        assert problem.endswith(fix)


def fake_python(path: Path, answer: str, *, fails: bool = False) -> Path:
    """A venv's Python: it answers the installer's probe with `answer` and records every pip
    command (its arguments and the build's environment); `pip wheel` leaves an empty wheel."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "from pathlib import Path\n"
        f"if {fails}: sys.exit(1)\n"
        f"if sys.argv[1] == '-c': print({answer!r}); sys.exit(0)\n"
        "names = ('CMAKE_ARGS', 'CFLAGS', 'CXXFLAGS', 'CMAKE_BUILD_PARALLEL_LEVEL')\n"
        "call = {'argv': sys.argv[1:], 'env': {name: os.environ.get(name) for name in names}}\n"
        "with open(Path(__file__).parent / 'calls.jsonl', 'a') as log:\n"
        "    log.write(json.dumps(call) + '\\n')\n"
        "if sys.argv[3] == 'wheel':\n"
        "    out = Path(sys.argv[sys.argv.index('-w') + 1])\n"
        f"    (out / 'llama_cpp_python-{VERSION}-py3-none-any.whl').write_text('')\n"
    )
    path.chmod(0o755)
    return path


def calls(python: Path) -> list[dict]:
    log = python.parent / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize(
    ("answer", "fails", "says"),
    [
        ("cpython x86_64 True 3 9 6", False, "was made by Python 3.9.6, too old"),
        ("cpython x86_64 False 3 11 2", False, "has no pip (its Python made it without ensurepip)"),
        ("", True, "exists but its Python does not run"),
    ],
)
def test_a_venv_that_cannot_be_reused_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: str, fails: bool, says: str
) -> None:
    venv = tmp_path / "venv"
    python = fake_python(venv / "bin" / "python", answer, fails=fails)
    assert install.main(["--venv", str(venv)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert says in line and f"rm -rf '{venv}'" in line
    assert calls(python) == []


def test_a_venv_made_under_rosetta_is_not_reused(tmp_path: Path) -> None:
    found = install.Found("cpython", (3, 12, 4), "x86_64")
    problem = install.venv_problem(tmp_path / ".venv", found, False, rosetta=True)
    assert "made by an x86_64 Python, which runs under Rosetta here: remove it" in problem


def test_a_venv_left_half_made_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's Python without python3-venv makes the folder, then fails for want of ensurepip;
    the folder left would be reused next time, without pip."""
    debian = tmp_path / "python3"
    debian.write_text(
        '#!/bin/sh\nmkdir -p "$3/bin"\n'
        "echo 'The virtual environment was not created successfully because ensurepip is not"
        " available.' >&2\nexit 1\n"
    )
    debian.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(debian))
    venv = tmp_path / "venv"
    with pytest.raises(SystemExit, match="sudo apt install python3-venv, then run the installer"):
        install.install(venv, False, False, ROOT)
    assert not venv.exists()


def fake_sysctl(folder: Path, values: dict[str, str]) -> None:
    """macOS's sysctl: `-n NAME` prints the value, or fails on a name this Mac does not have."""
    folder.mkdir(exist_ok=True)
    cases = "".join(f"    {name}) echo {value} ;;\n" for name, value in values.items())
    script = folder / "sysctl"
    script.write_text(
        '#!/bin/sh\ncase "$2" in\n'
        f"{cases}    *) echo \"sysctl: unknown oid '$2'\" >&2; exit 1 ;;\nesac\n"
    )
    script.chmod(0o755)


@pytest.mark.parametrize(
    ("system", "machine", "values", "refused"),
    [
        # x86_64 Python under Rosetta on an M1: both say so.
        ("darwin", "x86_64", {"hw.optional.arm64": "1", "sysctl.proc_translated": "1"}, True),
        # The same, from a process the kernel does not report as translated.
        ("darwin", "x86_64", {"hw.optional.arm64": "1", "sysctl.proc_translated": "0"}, True),
        # An Intel Mac: no hw.optional.arm64 at all.
        ("darwin", "x86_64", {"sysctl.proc_translated": "0"}, False),
        # An arm64 Python on an M1, and Linux on x86-64.
        ("darwin", "arm64", {"hw.optional.arm64": "1", "sysctl.proc_translated": "0"}, False),
        ("linux", "x86_64", {}, False),
    ],
)
def test_rosetta_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    system: str,
    machine: str,
    values: dict[str, str],
    refused: bool,
) -> None:
    fake_sysctl(tmp_path / "bin", values)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    problem = install.rosetta_problem(system, machine)
    assert ("install an arm64 Python" in problem) is refused


def which(*present: str) -> Callable[[str], str | None]:
    return lambda name: f"/usr/bin/{name}" if name in present else None


@pytest.mark.parametrize(
    ("system", "env", "present", "outputs", "says"),
    [
        ("linux", {}, ("cc", "c++"), {}, ""),
        ("linux", {}, ("gcc",), {}, "no C++ compiler: install one (Debian, Ubuntu"),
        ("linux", {}, (), {}, "no C compiler: install one"),
        ("linux", {"CC": "ccache gcc-13"}, ("c++",), {}, "CC=ccache gcc-13 is not a program"),
        ("darwin", {}, ("cc", "c++"), {}, "run `xcode-select --install`"),
        ("darwin", {}, ("cc", "c++"), {"xcode-select": "/Library/Developer/CLT"}, ""),
        ("win32", {}, ("cl",), {}, ""),
        ("win32", {}, (), {}, 'Visual Studio Build Tools with the workload "Desktop development'),
    ],
)
def test_the_compiler_check(
    system: str, env: dict[str, str], present: tuple[str, ...], outputs: dict, says: str
) -> None:
    problem = install.compiler_problem(
        system, "x86_64", env, which(*present), lambda command: outputs.get(command[0])
    )
    assert (says in problem) if says else problem == ""


def refusing_compiler(folder: Path, real: str) -> Path:
    """A compiler older than GCC 11: it does not know the AMX options."""
    folder.mkdir(exist_ok=True)
    script = folder / f"old-{real}"
    script.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in -mno-amx-*)\n'
        f"    echo \"{real}: error: unrecognized command-line option '$arg'\" >&2; exit 1 ;;\n"
        f'esac; done\nexec {real} "$@"\n'
    )
    script.chmod(0o755)
    return script


needs_compilers = pytest.mark.skipif(
    not (shutil.which("cc") and shutil.which("c++")), reason="no C/C++ compiler here to ask"
)


@needs_compilers
def test_a_compiler_that_refuses_the_amx_flags_builds_without_them(tmp_path: Path) -> None:
    env = {
        "CC": str(refusing_compiler(tmp_path, "cc")),
        "CXX": str(refusing_compiler(tmp_path, "c++")),
        "CFLAGS": "-O2",
    }
    flags = install.native_flags(env, "x86_64", False)
    assert (flags.cflags, flags.cxxflags, flags.amx_refused) == ("-O2", "", True)
    assert len(flags.notes) == 2 and all("refuses -mno-amx-tile" in n for n in flags.notes)


@needs_compilers
def test_a_compiler_that_takes_the_amx_flags_gets_them() -> None:
    flags = install.native_flags({"CFLAGS": "-O2"}, "x86_64", False)
    assert flags.cflags == f"-O2 {install.NO_AMX}" and flags.cxxflags == f" {install.NO_AMX}"
    assert not flags.amx_refused and flags.notes == ()


@pytest.mark.parametrize(
    ("machine", "windows"), [("aarch64", False), ("arm64", False), ("AMD64", True)]
)
def test_no_amx_flags_where_there_are_no_amx_kernels(machine: str, windows: bool) -> None:
    def never(compiler: str) -> bool:
        raise AssertionError("no compiler needs asking here")

    flags = install.build_flags({"CFLAGS": "-O2"}, machine, windows, never)
    assert (flags.cflags, flags.cxxflags) == ("-O2", "")


@pytest.mark.parametrize(
    ("cpus", "memory", "jobs"),
    [
        (4, GIB // 2, 1),
        (4, 2 * GIB, 2),
        (4, 3 * GIB, 3),
        (4, 8 * GIB, 4),
        (2, 24 * GIB, 2),
        (4, GIB, 1),
        (8, None, 8),
    ],
)
def test_compile_jobs_fit_in_memory(cpus: int, memory: int | None, jobs: int) -> None:
    assert install.build_jobs(cpus, memory) == jobs


HASH = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])"


def shell_key(machine: str, tag: str, env: dict[str, str]) -> str:
    """The key the shell installer computed (scripts/install.sh before install.py), verbatim."""
    script = f"""
CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_RPC=ON ${{CMAKE_ARGS:-}}"
case "{machine}" in
    x86_64|amd64|AMD64)
        no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        CFLAGS="${{CFLAGS:-}} $no_amx"
        CXXFLAGS="${{CXXFLAGS:-}} $no_amx" ;;
esac
export CMAKE_ARGS CFLAGS="${{CFLAGS:-}}" CXXFLAGS="${{CXXFLAGS:-}}"
printf '%s\\n' "{VERSION}" "{machine}" "{tag}" "$CMAKE_ARGS" "$CFLAGS" "$CXXFLAGS" \\
    | "{sys.executable}" -c '{HASH}'
"""
    clean = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "CFLAGS", "CXXFLAGS")}
    return subprocess.run(
        ["sh", "-c", script], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.strip()


ENVS = [{}, {"CMAKE_ARGS": "-DGGML_CUDA=on"}, {"CFLAGS": "-O2 -g", "CXXFLAGS": "-O2"}]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64", "arm64"])
@pytest.mark.parametrize("env", ENVS, ids=["default", "cuda", "user-flags"])
def test_wheels_the_shell_installer_built_are_found(machine: str, env: dict[str, str]) -> None:
    flags = install.build_flags(env, machine, False, lambda compiler: True)
    assert install.cache_key(VERSION, machine, "cpython311", flags) == shell_key(
        machine, "cpython311", env
    )


@pytest.mark.parametrize("env", ENVS, ids=["default", "cuda", "user-flags"])
def test_the_recorded_flags_build_the_same_wheel(env: dict[str, str]) -> None:
    """Doctor's advice repeats the recorded flags: fed back, they give the same key."""
    flags = install.build_flags(env, "x86_64", False, lambda compiler: True)
    python = install.Found("cpython", (3, 11, 7), "x86_64")
    record = install.build_record(VERSION, flags, "x86_64", python)
    again = {"CMAKE_ARGS": record["cmake_args"], "CFLAGS": record["cflags"]}
    again["CXXFLAGS"] = record["cxxflags"]
    again_flags = install.build_flags(again, "x86_64", False, lambda compiler: True)
    key = install.cache_key(VERSION, "x86_64", python.tag, flags)
    assert install.cache_key(VERSION, "x86_64", python.tag, again_flags) == key


@needs_compilers
def test_install_builds_once_with_the_flags_and_records_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = platform.machine()
    venv = tmp_path / "venv"
    python = fake_python(venv / "bin" / "python", f"cpython {machine} True 3 11 7")
    for name in ("CMAKE_BUILD_PARALLEL_LEVEL", "CFLAGS", "CXXFLAGS", "EDGESPEC_ALLOW_AMX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_CUDA=on")
    monkeypatch.setenv("CUDACXX", "/usr/local/cuda/bin/nvcc")  # where CMake is told it is
    monkeypatch.setenv("EDGESPEC_WHEELS", str(tmp_path / "wheels"))
    # 4 cores and 8 GiB available: two CUDA compile jobs.
    monkeypatch.setattr(install, "cpu_count", lambda: 4)
    monkeypatch.setattr(install, "available_memory", lambda: 8 * GIB)

    assert install.main(["--venv", str(venv)]) == 0
    wheel, installed, editable = calls(python)
    assert wheel["argv"][:3] == ["-m", "pip", "wheel"]
    assert wheel["env"]["CMAKE_BUILD_PARALLEL_LEVEL"] == "2"
    assert wheel["env"]["CMAKE_ARGS"] == "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_CUDA=on"
    x86 = machine.lower() in ("x86_64", "amd64")
    assert wheel["env"]["CFLAGS"] == (f" {install.NO_AMX}" if x86 else "")
    key = shell_key(machine, "cpython311", {"CMAKE_ARGS": "-DGGML_CUDA=on"})
    [built] = (tmp_path / "wheels" / key).glob("*.whl")
    assert installed["argv"][-1] == str(built) and editable["argv"][-2:] == ["-e", "."]
    assert json.loads((venv / "edgespec-build.json").read_text()) == {
        "llama_cpp_python": VERSION,
        "cmake_args": "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_CUDA=on",
        "cflags": install.NO_AMX if x86 else "",
        "cxxflags": install.NO_AMX if x86 else "",
        "machine": machine,
        "python": "3.11.7",
    }

    # The same flags again: the cached wheel, and jobs the user chose are left alone.
    monkeypatch.setenv("CMAKE_BUILD_PARALLEL_LEVEL", "7")
    assert install.main(["--venv", str(venv)]) == 0
    assert [call["argv"][2] for call in calls(python)[3:]] == ["install", "install"]


def test_windows_installs_without_sh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = tmp_path / "venv"
    python = fake_python(venv / "Scripts" / "python.exe", "cpython AMD64 True 3 12 4")
    monkeypatch.setenv("EDGESPEC_WHEELS", str(tmp_path / "wheels"))
    for name in ("CMAKE_ARGS", "CFLAGS", "CXXFLAGS"):
        monkeypatch.delenv(name, raising=False)

    def no_sh(*args: object) -> None:
        raise AssertionError("the RPC server's build needs sh")

    monkeypatch.setattr(install, "build_tools", no_sh)
    install.install(venv, True, True, ROOT)
    wheel, _, editable = calls(python)
    assert wheel["env"]["CFLAGS"] == "" and editable["argv"][-2:] == ["-e", ".[dev]"]
    assert "RPC server is not built on Windows" in capsys.readouterr().err
    assert json.loads((venv / "edgespec-build.json").read_text())["python"] == "3.12.4"


def test_the_rpc_server_is_built_with_the_users_flags_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build_llama_tools.sh adds -DGGML_RPC=ON and the AMX flags itself, and keys its cache by
    what it is given; where the compiler refuses the AMX flags it must not add them."""
    (tmp_path / "scripts").mkdir()
    seen = tmp_path / "seen"
    (tmp_path / "scripts" / "build_llama_tools.sh").write_text(
        f'printf "%s|" "$CMAKE_ARGS" "$CFLAGS" "$CXXFLAGS" "${{EDGESPEC_ALLOW_AMX:-}}" > {seen}\n'
    )
    monkeypatch.delenv("EDGESPEC_ALLOW_AMX", raising=False)
    env = {"CMAKE_ARGS": "-DGGML_CUDA=on", "CFLAGS": "-O2"}
    install.build_tools(install.build_flags(env, "x86_64", False, lambda c: True), tmp_path)
    assert seen.read_text() == "-DGGML_CUDA=on|-O2|||"
    install.build_tools(install.build_flags(env, "x86_64", False, lambda c: False), tmp_path)
    assert seen.read_text() == "-DGGML_CUDA=on|-O2||1|"


# --- checks of the machine before a long build -------------------------------------------------

checks = load_script("install_checks")


@pytest.mark.parametrize(
    ("machine", "bits", "refused"),
    [("aarch64", 32, True), ("armv7l", 32, True), ("aarch64", 64, False), ("x86_64", 64, False)],
)
def test_a_32_bit_arm_python_is_refused_before_the_build(
    machine: str, bits: int, refused: bool
) -> None:
    """32-bit Raspberry Pi OS boots a 64-bit kernel: uname says aarch64, the Python is 32-bit,
    and llguidance has no wheel for it (the install failed after llama.cpp's build)."""
    problem = checks.userland_problem(machine, bits)
    assert bool(problem) == refused
    assert not refused or ("64-bit" in problem and "llguidance" in problem)


def nothing(name: str) -> None:
    return None


def test_a_cuda_build_without_nvcc_is_refused(tmp_path: Path) -> None:
    cuda = {"CMAKE_ARGS": "-DGGML_CUDA=on"}
    [problem] = checks.cuda_problems(cuda, False, which=nothing, toolkits=())
    assert "no nvcc" in problem and "CUDACXX" in problem
    assert checks.cuda_problems({"CMAKE_ARGS": "-DGGML_CUDA=OFF"}, False, which=nothing) == []
    assert checks.cuda_problems({}, False, which=nothing) == []
    # Found where CMake looks: CUDACXX, the compiler option, PATH, the toolkit's folder.
    assert checks.cuda_problems({**cuda, "CUDACXX": "/opt/nvcc"}, False, which=nothing) == []
    asked = {"CMAKE_ARGS": "-DGGML_CUDA=on -DCMAKE_CUDA_COMPILER=/opt/cuda-12/bin/nvcc"}
    assert checks.cuda_problems(asked, False, which=nothing) == []
    assert checks.cuda_problems(cuda, False, which=lambda name: "/usr/bin/nvcc") == []
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    home = {**cuda, "CUDA_HOME": str(tmp_path)}
    assert checks.cuda_problems(home, False, which=nothing, toolkits=()) == []
    assert checks.cuda_problems(cuda, False, which=nothing, toolkits=(str(tmp_path),)) == []


def visual_studio(tmp_path: Path, integration: bool) -> tuple[dict[str, str], Callable[..., str]]:
    """A Visual Studio that vswhere finds, with CUDA's MSBuild files or without."""
    installer = tmp_path / "x86" / "Microsoft Visual Studio" / "Installer"
    installer.mkdir(parents=True)
    (installer / "vswhere.exe").write_bytes(b"MZ")
    vs = tmp_path / "VS" / "2022" / "BuildTools"
    custom = vs / "MSBuild" / "Microsoft" / "VC" / "v170" / "BuildCustomizations"
    custom.mkdir(parents=True)
    if integration:
        (custom / "CUDA 12.4.props").write_text("<Project/>")
    env = {"CMAKE_ARGS": "-DGGML_CUDA=on", "ProgramFiles(x86)": str(tmp_path / "x86")}
    env["CUDA_PATH"] = str(tmp_path / "cuda")
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "nvcc.exe").write_bytes(b"MZ")
    return env, lambda command: str(vs)


@pytest.mark.parametrize(
    ("integration", "long_paths"), [(True, True), (False, True), (True, False)]
)
def test_a_windows_cuda_build_needs_visual_studios_cuda_files_and_long_paths(
    tmp_path: Path, integration: bool, long_paths: bool
) -> None:
    env, vswhere = visual_studio(tmp_path, integration)
    found = checks.cuda_problems(
        env, True, which=nothing, output=vswhere, long_paths=lambda: long_paths
    )
    said = " | ".join(found)
    assert ("No CUDA toolset found" in said) == (not integration)
    assert ("LongPathsEnabled" in said) == (not long_paths)
    # Ninja needs no MSBuild files.
    ninja = {**env, "CMAKE_GENERATOR": "Ninja"}
    ninja_found = checks.cuda_problems(
        ninja, True, which=nothing, output=vswhere, long_paths=lambda: long_paths
    )
    assert all("No CUDA toolset" not in p for p in ninja_found)


WINDOWS_NVCC = r"C:\CUDA\v12.4\bin\nvcc.exe"


def test_a_windows_path_in_cmake_args_reaches_the_build_and_the_advice_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """scikit-build-core splits CMAKE_ARGS as POSIX does, on Windows too: the installer quotes
    what was typed there, and doctor's advice gives it back as it was (not C:CUDAv12.4...)."""
    from edgespec.buildcheck import rebuild

    typed = {"CMAKE_ARGS": f"-DGGML_CUDA=on -DCMAKE_CUDA_COMPILER={WINDOWS_NVCC}"}
    flags = install.build_flags(typed, "AMD64", True, lambda compiler: True)
    wanted = ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_COMPILER={WINDOWS_NVCC}"]
    assert shlex.split(flags.cmake_args) == ["-DLLAVA_BUILD=OFF", "-DGGML_RPC=ON", *wanted]
    python = install.Found("cpython", (3, 12, 4), "AMD64")
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(rebuild.platform, "machine", lambda: "AMD64")
    old = {"cmake_args": f"-DLLAVA_BUILD=OFF -DGGML_RPC=ON {typed['CMAKE_ARGS']}"}  # as typed
    for record in (install.build_record(VERSION, flags, "AMD64", python), old):
        (tmp_path / rebuild.RECORD).write_text(json.dumps(record))
        assert list(rebuild.recorded_flags(tmp_path).cmake_args) == wanted
        advice = rebuild.reinstall_command(rebuild.recorded_flags(tmp_path))
        # PowerShell's '...' with '' for a quote, then scikit-build-core's split
        quoted = advice.split("$env:CMAKE_ARGS='", 1)[1].split("'; ", 1)[0].replace("''", "'")
        assert shlex.split(quoted)[2:] == wanted


def test_source_date_epoch_does_not_turn_native_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ggml's CMake builds for any CPU where SOURCE_DATE_EPOCH is set: the build goes without it,
    and says so."""
    venv = tmp_path / "venv"
    python = fake_python(venv / "bin" / "python", "cpython x86_64 True 3 11 7")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("EDGESPEC_WHEELS", str(tmp_path / "wheels"))
    monkeypatch.setattr(install, "native_flags", lambda env, machine, windows: install.build_flags(
        {}, machine, windows, lambda compiler: True
    ))  # fmt: skip
    install.install(venv, False, False, ROOT)
    wheel = calls(python)[0]
    assert wheel["argv"][:3] == ["-m", "pip", "wheel"]
    assert "SOURCE_DATE_EPOCH" not in wheel["env"]
    assert "SOURCE_DATE_EPOCH is set" in capsys.readouterr().err


def test_cuda_compile_jobs_get_more_memory_each() -> None:
    assert install.job_memory("-DLLAVA_BUILD=OFF -DGGML_RPC=ON") == install.JOB_MEMORY
    assert install.job_memory("-DGGML_RPC=ON -DGGML_CUDA=on") == install.CUDA_JOB_MEMORY
    assert install.build_jobs(16, 16 * GIB, install.CUDA_JOB_MEMORY) == 4
    assert install.build_jobs(16, 16 * GIB) == 16
