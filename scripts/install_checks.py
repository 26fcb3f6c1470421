"""The installer's checks of the machine (scripts/install.py runs them before anything is made
or built, each a line naming the fix, "" where nothing is wrong): the environment's Python,
Rosetta, a 32-bit userland, the compilers, and for a CUDA build its toolkit and, on Windows,
Visual Studio's CUDA integration and long paths."""

import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

MIN_PYTHON = (3, 10)  # as scripts/install.py's own check of the Python that runs it
# Debian and Ubuntu ship Python's venv module without ensurepip unless this is installed.
VENV_PACKAGE = "on Debian, Ubuntu, Raspberry Pi OS: sudo apt install python3-venv"
Command = list[str]


class Found(NamedTuple):
    """A Python interpreter, as it describes itself."""

    implementation: str
    version: tuple[int, ...]
    machine: str
    pip: bool = True

    @property
    def tag(self) -> str:
        return f"{self.implementation}{self.version[0]}{self.version[1]}"


def venv_python(venv: Path, windows: bool) -> Path:
    return venv / "Scripts" / "python.exe" if windows else venv / "bin" / "python"


def probe(python: Path) -> Found | None:
    """What a Python is (None if it does not run). The code runs on any Python 3."""
    code = (
        "import importlib.util, platform, sys; print(sys.implementation.name, platform.machine(),"
        " importlib.util.find_spec('pip') is not None, *sys.version_info[:3])"
    )
    try:
        out = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
        return Found(out[0], tuple(int(part) for part in out[3:6]), out[1], out[2] == "True")
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def venv_problem(venv: Path, found: Found | None, windows: bool, rosetta: bool = False) -> str:
    """Why an existing environment cannot be reused ("" if it can). rosetta: its Python is an
    x86_64 one on Apple Silicon."""
    remove = f'rmdir /s /q "{venv}"' if windows else f"rm -rf '{venv}'"
    if found is None:
        return (
            f"install: {venv} exists but its Python does not run: remove it ({remove})"
            " and run the installer again"
        )
    if found.version[:2] < MIN_PYTHON:
        return (
            f"install: {venv} was made by Python {'.'.join(map(str, found.version))}, too old"
            f" for edgespec (3.10 or newer): remove it ({remove}) and run the installer again"
            " with Python 3.10 or newer"
        )
    if rosetta:
        return (
            f"install: {venv} was made by an x86_64 Python, which runs under Rosetta here:"
            f" remove it ({remove}) and run the installer with an arm64 Python"
        )
    if not found.pip:
        return (
            f"install: {venv} has no pip (its Python made it without ensurepip): remove it"
            f" ({remove}) and run the installer again ({VENV_PACKAGE} first)"
        )
    return ""


def command_output(command: Command) -> str | None:
    """A command's stdout, None if it cannot run or fails."""
    try:
        run = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip() if run.returncode == 0 else None


def rosetta_problem(
    system: str, machine: str, output: Callable[[Command], str | None] = command_output
) -> str:
    """An x86_64 Python on Apple Silicon (Rosetta) builds an x86 llama.cpp: slower, and no Metal
    for the GPU. hw.optional.arm64 is 1 on Apple Silicon whoever asks; a translated process also
    reads sysctl.proc_translated = 1."""
    if system != "darwin" or machine != "x86_64":
        return ""
    if "1" not in (
        output(["sysctl", "-n", "hw.optional.arm64"]),
        output(["sysctl", "-n", "sysctl.proc_translated"]),
    ):
        return ""
    return (
        "install: this Python is x86_64, running under Rosetta on an Apple Silicon Mac, and would"
        " build an x86 llama.cpp: install an arm64 Python (python.org's universal2 installer, or"
        " Homebrew in /opt/homebrew) and run it from a native terminal, not under `arch -x86_64`"
    )


def find_compiler(
    variable: str,
    names: tuple[str, ...],
    env: Mapping[str, str],
    which: Callable[[str], str | None],
) -> Command | None:
    """The compiler CMake will pick: $CC / $CXX, else the first of its usual names found."""
    if env.get(variable):
        command = shlex.split(env[variable])
        return command if command and which(command[0]) else None
    return next(([name] for name in names if which(name)), None)


def compilers(
    env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which
) -> tuple[Command | None, Command | None]:
    return (
        find_compiler("CC", ("cc", "gcc", "clang"), env, which),
        find_compiler("CXX", ("c++", "g++", "clang++"), env, which),
    )


def msvc_found(
    env: Mapping[str, str],
    machine: str,
    which: Callable[[str], str | None],
    output: Callable[[Command], str | None],
) -> bool:
    """cl on PATH (a developer prompt), or Visual Studio's C++ tools where CMake looks for them."""
    if which("cl"):
        return True
    installer = Path(env.get("ProgramFiles(x86)", r"C:\Program Files (x86)"))
    vswhere = installer / "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
    tools = "ARM64" if machine.upper() == "ARM64" else "x86.x64"
    component = f"Microsoft.VisualStudio.Component.VC.Tools.{tools}"
    return bool(
        vswhere.exists()
        and output(
            [
                str(vswhere),
                "-latest",
                "-products",
                "*",
                "-requires",
                component,
                "-property",
                "installationPath",
            ]
        )
    )


def compiler_problem(
    system: str,
    machine: str,
    env: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    output: Callable[[Command], str | None] = command_output,
) -> str:
    """Why llama.cpp cannot be compiled here ("" if it can). CMake and Ninja need no check:
    scikit-build-core, llama-cpp-python's build backend, asks pip for them when they are missing."""
    if system == "win32":
        if msvc_found(env, machine, which, output):
            return ""
        return (
            "install: no C++ compiler: install Visual Studio Build Tools with the workload"
            ' "Desktop development with C++", then run the installer again'
        )
    if system == "darwin" and output(["xcode-select", "-p"]) is None:
        return "install: no C compiler: run `xcode-select --install`, then the installer again"
    for variable, command in zip(("CC", "CXX"), compilers(env, which), strict=True):
        if command is None and env.get(variable):
            return (
                f"install: {variable}={env[variable]} is not a program here:"
                f" set {variable} to a compiler, or unset it"
            )
        if command is None:
            return (
                f"install: no {'C' if variable == 'CC' else 'C++'} compiler: install one"
                " (Debian, Ubuntu, Raspberry Pi OS: sudo apt install build-essential;"
                " Fedora: sudo dnf install gcc-c++; Alpine: apk add build-base)"
            )
    return ""


def userland_problem(machine: str, pointer_bits: int) -> str:
    """A 32-bit ARM Python: 32-bit Raspberry Pi OS boots a 64-bit kernel, so the machine says
    aarch64, but llguidance (which edgespec needs) has no 32-bit ARM wheel of 1.9 or newer and
    its install would fail after llama.cpp's long build."""
    if pointer_bits != 32 or not machine.lower().startswith(("aarch64", "arm")):
        return ""
    return (
        "install: this Python is a 32-bit ARM one (a 32-bit OS, whatever its 64-bit kernel says):"
        " llguidance, which edgespec needs, has no 32-bit ARM wheel; install the 64-bit OS"
        " (Raspberry Pi Imager: Raspberry Pi OS (64-bit)) and run the installer there"
    )


def windows_words(text: str) -> list[str]:
    """CMAKE_ARGS as typed on Windows: quotes group, a backslash is a path's (C:\\CUDA\\v12.4),
    never an escape, as it is to scikit-build-core's POSIX split (C:CUDAv12.4)."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    lexer.escape = ""
    return list(lexer)


def cuda_asked(words: list[str]) -> bool:
    """Whether these CMake options switch llama.cpp's CUDA backend on."""
    for word in words:
        name, _, value = word.partition("=")
        if name.upper() in ("-DGGML_CUDA", "-DGGML_CUDA:BOOL"):
            return value.upper() in ("ON", "1", "TRUE", "YES")
    return False


TOOLKITS = ("/usr/local/cuda", "/opt/cuda")  # where CMake finds a toolkit unasked


def nvcc_problem(
    env: Mapping[str, str],
    words: list[str],
    windows: bool,
    which: Callable[[str], str | None] = shutil.which,
    toolkits: tuple[str, ...] = TOOLKITS,
) -> str:
    """A CUDA build needs nvcc where CMake looks: CUDACXX, -DCMAKE_CUDA_COMPILER, PATH, the
    toolkit's CUDA_PATH (its Windows installer sets it) or /usr/local/cuda."""
    if env.get("CUDACXX") or any(w.upper().startswith("-DCMAKE_CUDA_COMPILER=") for w in words):
        return ""
    if which("nvcc"):
        return ""
    nvcc = "nvcc.exe" if windows else "nvcc"
    roots = [env.get("CUDA_PATH"), env.get("CUDA_HOME"), *toolkits]
    if any(root and (Path(root) / "bin" / nvcc).is_file() for root in roots):
        return ""
    return (
        "install: CMAKE_ARGS asks for CUDA (-DGGML_CUDA=on) but there is no nvcc: install NVIDIA's"
        " CUDA toolkit (Windows: after Visual Studio, so that it adds its Visual Studio"
        " integration), or set CUDACXX to its nvcc"
    )


def visual_studio(env: Mapping[str, str], output: Callable[[Command], str | None]) -> Path | None:
    """The newest Visual Studio (or Build Tools) with C++, as vswhere finds it."""
    installer = Path(env.get("ProgramFiles(x86)", r"C:\Program Files (x86)"))
    vswhere = installer / "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
    if not vswhere.exists():
        return None
    found = output([str(vswhere), "-latest", "-products", "*", "-property", "installationPath"])
    return Path(found) if found else None


def vs_cuda_problem(env: Mapping[str, str], output: Callable[[Command], str | None]) -> str:
    """CMake's Visual Studio generator (scikit-build-core's default on Windows) compiles CUDA
    through the MSBuild files the CUDA installer copies into Visual Studio, when Visual Studio
    was there first; without them CMake stops with "No CUDA toolset found"."""
    if "ninja" in env.get("CMAKE_GENERATOR", "").lower():
        return ""
    vs = visual_studio(env, output)
    if vs is None or any(vs.glob("MSBuild/Microsoft/VC/*/BuildCustomizations/CUDA *.props")):
        return ""
    return (
        f'install: Visual Studio ({vs}) has no CUDA integration, so CMake would stop with "No'
        ' CUDA toolset found": run the CUDA installer again and keep its Visual Studio'
        " Integration, or copy the files of the toolkit's"
        r" extras\visual_studio_integration\MSBuildExtensions into"
        rf" {vs}\MSBuild\Microsoft\VC\v170\BuildCustomizations"
    )


def windows_long_paths() -> bool | None:
    """Whether Windows lifts its 260-character path limit (None: not read)."""
    try:
        import winreg

        key = r"SYSTEM\CurrentControlSet\Control\FileSystem"
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, key) as found:  # type: ignore[attr-defined]
            value = winreg.QueryValueEx(found, "LongPathsEnabled")[0]  # type: ignore[attr-defined]
    except (ImportError, OSError):
        return None
    return bool(value)


def long_paths_problem(enabled: bool | None) -> str:
    """A CUDA build's object files lie deeper than 260 characters under pip's build folder."""
    if enabled is not False:
        return ""
    return (
        "install: Windows limits paths to 260 characters, which a CUDA build of llama.cpp"
        " exceeds: lift the limit (in an administrator PowerShell: New-ItemProperty -Path"
        r" HKLM:\SYSTEM\CurrentControlSet\Control\FileSystem -Name LongPathsEnabled -Value 1"
        " -PropertyType DWORD -Force) and run the installer again"
    )


def cuda_problems(
    env: Mapping[str, str],
    windows: bool,
    which: Callable[[str], str | None] = shutil.which,
    output: Callable[[Command], str | None] = command_output,
    long_paths: Callable[[], bool | None] = windows_long_paths,
    toolkits: tuple[str, ...] = TOOLKITS,
) -> list[str]:
    """What stops a CUDA build (where CMAKE_ARGS asks for one) after minutes, found first."""
    text = env.get("CMAKE_ARGS", "")
    words = windows_words(text) if windows else shlex.split(text)
    if not cuda_asked(words):
        return []
    problems = [nvcc_problem(env, words, windows, which, toolkits)]
    if windows:
        problems += [vs_cuda_problem(env, output), long_paths_problem(long_paths())]
    return [problem for problem in problems if problem]
