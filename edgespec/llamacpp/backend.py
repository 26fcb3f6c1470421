"""llama.cpp's library as a whole: its start and log, the devices ggml registered (GPUs, RPC
servers), its system info and version, and its quantizer."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path
from typing import Any

import llama_cpp

from edgespec.errors import FetchError
from edgespec.system import settings
from edgespec.system.device import GpuDevice, Hardware, probe


@llama_cpp.llama_log_callback
def _log_to_stderr_when_debugging(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp logs every tensor it loads; that noise belongs to EDGESPEC_DEBUG=1 only.
    if settings.debug():
        os.write(2, text)


@functools.cache
def init_backend() -> None:
    llama_cpp.llama_log_set(_log_to_stderr_when_debugging, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()


_GPU, _IGPU = 1, 2  # enum ggml_backend_dev_type
_METAL = "MTL"  # the name ggml's Metal backend registers under

_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
# Each ggml function edgespec calls: the library that defines it (`nm -D --defined-only`) and
# its signature. Bound from that library: Windows' GetProcAddress looks nowhere else.
GGML_FUNCTIONS: dict[str, tuple[str, list[Any], Any]] = {
    "ggml_backend_dev_count": ("ggml", [], ctypes.c_size_t),
    "ggml_backend_dev_get": ("ggml", [ctypes.c_size_t], ctypes.c_void_p),
    "ggml_backend_dev_type": ("ggml-base", [ctypes.c_void_p], ctypes.c_int),
    "ggml_backend_dev_name": ("ggml-base", [ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_description": ("ggml-base", [ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_memory": ("ggml-base", [ctypes.c_void_p, _SIZE_P, _SIZE_P], None),
    "ggml_backend_dev_backend_reg": ("ggml-base", [ctypes.c_void_p], ctypes.c_void_p),
    "ggml_backend_reg_name": ("ggml-base", [ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_reg_dev_count": ("ggml-base", [ctypes.c_void_p], ctypes.c_size_t),
    "ggml_backend_reg_dev_get": ("ggml-base", [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
    "ggml_backend_rpc_add_server": ("ggml-rpc", [ctypes.c_char_p], ctypes.c_void_p),
    "ggml_version": ("ggml-base", [], ctypes.c_char_p),
    "ggml_commit": ("ggml-base", [], ctypes.c_char_p),
}


class _DlInfo(ctypes.Structure):
    _fields_ = [  # dladdr's Dl_info
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def library_path(name: str) -> Path:
    """The ggml library `name` (`ggml-base`: libggml-base.so, ...) as llama.cpp loaded it: the
    wheel holds copies, not links (libggml.so beside libggml.so.0, which libllama needs), and
    opening another name of it would load a second copy with state of its own."""
    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    prefix = "" if sys.platform == "win32" else "lib"
    shipped = Path(llama_cpp.__file__).parent / "lib" / f"{prefix}{name}{suffix}"
    if sys.platform == "win32":  # a DLL is loaded once, by its name
        return shipped
    return _loaded_copy(name) or shipped


@functools.cache
def _loaded_copy(name: str) -> Path | None:
    """The file of `name` that the process mapped for libllama: dlsym through libllama finds a
    function of it in libllama's own dependencies, and dladdr names the file it came from."""
    fn = next(fn for fn, (library, _, _) in GGML_FUNCTIONS.items() if library == name)
    llama: Any = getattr(llama_cpp.llama_cpp, "_lib", None)  # llama-cpp-python's libllama
    try:
        address = ctypes.cast(getattr(llama, fn), ctypes.c_void_p)
        dladdr = llama.dladdr  # libc's, one of libllama's dependencies too
    except AttributeError:
        return None
    info = _DlInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return Path(info.dli_fname.decode())


@functools.cache
def ggml(fn: str) -> Any:
    """One of GGML_FUNCTIONS, bound once (llama-cpp-python has loaded its library already)."""
    library, argtypes, restype = GGML_FUNCTIONS[fn]
    func = getattr(ctypes.CDLL(str(library_path(library))), fn)
    func.argtypes = argtypes
    func.restype = restype
    return func


def _devices() -> list[tuple[Any, int]]:
    """Every device ggml registered (CPU, GPUs, accelerators) and its type."""
    init_backend()
    devices = (ggml("ggml_backend_dev_get")(i) for i in range(ggml("ggml_backend_dev_count")()))
    return [(dev, int(ggml("ggml_backend_dev_type")(dev))) for dev in devices]


def supports_gpu_offload() -> bool:
    """Whether a GPU of this machine can take layers (`llama_supports_gpu_offload` also says yes
    for a CPU build with the RPC backend)."""
    return any(kind in (_GPU, _IGPU) for _, kind in _devices())


def _text(fn: str, *args: Any) -> str:
    return (ggml(fn)(*args) or b"").decode("utf-8", "replace")


def hardware() -> Hardware:
    """This machine as the plan sees it, with this build's offload and ggml's GPUs."""
    return probe(supports_gpu_offload(), system_info(), gpu_devices())


def gpu_devices() -> list[GpuDevice]:
    """This machine's GPUs and their free memory as ggml reports it; integrated GPUs and Apple's
    (Metal) compute from the RAM itself."""
    found = []
    for dev, kind in _devices():
        if kind not in (_GPU, _IGPU):
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        ggml("ggml_backend_dev_memory")(dev, ctypes.byref(free), ctypes.byref(total))
        backend = _text("ggml_backend_reg_name", ggml("ggml_backend_dev_backend_reg")(dev))
        found.append(
            GpuDevice(
                name=_text("ggml_backend_dev_name", dev),
                description=_text("ggml_backend_dev_description", dev),
                free=int(free.value),
                total=int(total.value),
                unified=kind == _IGPU or backend == _METAL,
            )
        )
    return found


def supports_rpc() -> bool:
    return bool(llama_cpp.llama_supports_rpc())


def system_info() -> str:
    init_backend()
    return bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace").strip()


def quantize(source: Path, out: Path, kind: str, pure: bool) -> None:
    """`source` requantized to `kind` (F16, BF16, Q8_0, Q4_0) as `llama-quantize
    --allow-requantize [--pure]` does, with no tool to build; `pure`: every matrix `kind`."""
    init_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind}")
    params.allow_requantize = True
    params.pure = pure
    # It logs through the callback above; a failure is a status, not an exception.
    if llama_cpp.llama_model_quantize(
        str(source).encode(), str(out).encode(), ctypes.byref(params)
    ):
        raise FetchError(f"llama.cpp could not quantize {source.name} to {kind}")


def library_version() -> str:
    return str(llama_cpp.__version__)


def ggml_version() -> str:
    """llama.cpp's own version and commit (llama-cpp-python does not bind them)."""
    return f"{_text('ggml_version')} ({_text('ggml_commit')})"
