"""Every llama.cpp function edgespec calls is bound from the library that defines it.

Linux's dlsym finds a function in a library's dependencies too, so a function looked up in the
wrong library works here and fails on Windows, whose GetProcAddress looks only in the library
itself (every plan, load and doctor check raised AttributeError there). These tests read what
each library defines (`nm`) instead of trusting dlsym, and bind through a loader that is as
strict as GetProcAddress."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from edgespec.llamacpp import backend

SOURCE = Path(backend.__file__).parent


def defined(library: Path) -> set[str]:
    """The functions and data a shared library defines and exports."""
    if shutil.which("nm") is None:
        pytest.skip("nm is not installed: what a library defines cannot be read")
    # macOS's nm lists a library's exports with -gU, each name with a leading underscore.
    args = ["-gU"] if sys.platform == "darwin" else ["-D", "--defined-only"]
    out = subprocess.run(
        ["nm", *args, str(library)], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return {n.removeprefix("_") for n in names} if sys.platform == "darwin" else names


def bound_libraries() -> dict[str, list[str]]:
    """Library -> the functions bound from it (the RPC library only where it was built)."""
    by_library: dict[str, list[str]] = {}
    for fn, (library, _, _) in backend.GGML_FUNCTIONS.items():
        if library == "ggml-rpc" and not llama_cpp.llama_supports_rpc():
            continue
        by_library.setdefault(library, []).append(fn)
    return by_library


def test_every_ggml_function_is_defined_by_the_library_it_is_bound_from() -> None:
    # The RPC library's only where this build has it; the others always.
    assert {"ggml", "ggml-base"} <= set(bound_libraries())
    for library, functions in bound_libraries().items():
        missing = sorted(set(functions) - defined(backend.library_path(library)))
        assert not missing, f"{backend.library_path(library).name} does not define {missing}"


def test_doctors_version_functions_are_defined_in_ggml_base() -> None:
    """doctor.py reads the version from ggml-base by name, as Windows would need."""
    assert {"ggml_version", "ggml_commit"} <= defined(backend.library_path("ggml-base"))


def _is_c_function(obj: object) -> bool:
    # A bound function has its argtypes; a callback type (a class) has them too.
    return hasattr(obj, "argtypes") and not isinstance(obj, type)


def test_the_llama_functions_edgespec_calls_are_defined_in_libllama() -> None:
    """llama-cpp-python binds these from libllama at import; edgespec's calls must be there."""
    used = set()
    for path in SOURCE.rglob("*.py"):
        used |= set(re.findall(r"\bllama_cpp\.(llama_\w+)\b", path.read_text(encoding="utf-8")))
    # The C functions among them (not the structures, constants and callback types).
    functions = {name for name in used if _is_c_function(getattr(llama_cpp, name, None))}
    assert {"llama_decode", "llama_model_load_from_file", "llama_supports_rpc"} <= functions
    library = Path(llama_cpp.llama_cpp._lib._name)
    assert not sorted(functions - defined(library))


class DefinedOnly:
    """A shared library as Windows' GetProcAddress sees it: only what it defines itself."""

    real_cdll = ctypes.CDLL

    def __init__(self, path: str, *args: Any, **kwargs: Any) -> None:
        self._lib = self.real_cdll(path, *args, **kwargs)
        self._defined = defined(Path(path))
        self._name = Path(path).name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._defined:
            raise AttributeError(f"function '{name}' not found in {self._name}")
        return getattr(self._lib, name)


@pytest.fixture
def strict_loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ggml library edgespec opens is opened as GetProcAddress would see it."""
    monkeypatch.setattr(ctypes, "CDLL", DefinedOnly)
    backend.ggml.cache_clear()
    yield
    backend.ggml.cache_clear()


@pytest.mark.usefixtures("strict_loader")
def test_binding_works_where_only_a_librarys_own_functions_can_be_found() -> None:
    """What plan, load and doctor ask of ggml works with a Windows-strict loader."""
    assert backend.supports_gpu_offload() is False  # this CPU build: the CPU device only
    assert backend.gpu_devices() == []
    for functions in bound_libraries().values():
        for fn in functions:
            assert backend.ggml(fn).restype == backend.GGML_FUNCTIONS[fn][2]


def test_gpu_devices_read_each_gpus_memory_and_whether_it_is_the_ram(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CPU, a CUDA card and an Apple GPU, as ggml would report them."""
    devices = {  # handle: type, name, description, backend, free, total
        1: (0, b"CPU", b"AMD EPYC", b"CPU", 0, 0),
        2: (1, b"CUDA0", b"NVIDIA GeForce RTX 4060", b"CUDA", 7_600_000_000, 8_000_000_000),
        3: (1, b"MTL0", b"Apple M1", b"MTL", 10_000_000_000, 11_400_000_000),
        4: (2, b"Vulkan0", b"Intel(R) Iris(R) Xe Graphics", b"Vulkan", 8 << 30, 16 << 30),
    }

    def memory(dev: int, free: Any, total: Any) -> None:
        free._obj.value, total._obj.value = devices[dev][4:]

    fakes = {
        "ggml_backend_dev_count": lambda: len(devices),
        "ggml_backend_dev_get": lambda i: i + 1,
        "ggml_backend_dev_type": lambda dev: devices[dev][0],
        "ggml_backend_dev_name": lambda dev: devices[dev][1],
        "ggml_backend_dev_description": lambda dev: devices[dev][2],
        "ggml_backend_dev_backend_reg": lambda dev: -dev,
        "ggml_backend_reg_name": lambda reg: devices[-reg][3],
        "ggml_backend_dev_memory": memory,
    }
    monkeypatch.setattr(backend, "ggml", fakes.__getitem__)
    monkeypatch.setattr(backend, "init_backend", lambda: None)
    gpus = backend.gpu_devices()
    assert [(g.name, g.description, g.free, g.total, g.unified) for g in gpus] == [
        ("CUDA0", "NVIDIA GeForce RTX 4060", 7_600_000_000, 8_000_000_000, False),
        ("MTL0", "Apple M1", 10_000_000_000, 11_400_000_000, True),
        ("Vulkan0", "Intel(R) Iris(R) Xe Graphics", 8 << 30, 16 << 30, True),
    ]
    assert backend.supports_gpu_offload() is True


LOADED = """
import collections, json, re
from edgespec.llamacpp import backend
backend.gpu_devices()
backend.ggml_version()
for fn in backend.GGML_FUNCTIONS:
    if backend.GGML_FUNCTIONS[fn][0] != "ggml-rpc" or backend.supports_rpc():
        backend.ggml(fn)
files = collections.defaultdict(set)
for line in open("/proc/self/maps"):
    found = re.search(r"/(lib(?:ggml[-a-z]*|llama))\\.so[.0-9]*$", line.strip())
    if found:
        files[found.group(1)].add(line.split()[-1])
print(json.dumps({k: sorted(v) for k, v in files.items()}))
"""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc/self/maps")
def test_edgespec_binds_ggml_from_the_copy_llama_cpp_loaded() -> None:
    """The wheel holds libggml.so beside libggml.so.0 as copies, not links: binding by the
    plain name mapped a second libggml and libggml-base beside llama.cpp's own."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED], capture_output=True, text=True, check=True, timeout=120
    )
    mapped = json.loads(done.stdout)
    assert {"libllama", "libggml", "libggml-base"} <= set(mapped)
    assert {name: len(paths) for name, paths in mapped.items()} == dict.fromkeys(mapped, 1), mapped
