"""What the device offers: memory, cores, GPU offload, power."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class GpuDevice:
    """A GPU as llama.cpp's ggml sees it (`ggml_backend_dev_memory` and friends)."""

    name: str  # ggml's name for it: CUDA0, MTL0, Vulkan0, ...
    description: str  # the card or chip
    free: int  # bytes
    total: int
    unified: bool  # it computes from the RAM (Apple's GPUs, integrated ones): no VRAM of its own


@dataclass(frozen=True)
class Hardware:
    total_ram: int
    available_ram: int
    physical_cores: int
    logical_cores: int
    gpu_offload: bool
    backend: str  # "cpu", "metal", "cuda", "vulkan", ... as llama.cpp was built
    on_battery: bool | None  # None where the platform does not say
    machine: str
    gpus: tuple[GpuDevice, ...] = ()  # where layers can be offloaded, with their memory

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def backend_name(gpu_offload: bool, system_info: str) -> str:
    if not gpu_offload:
        return "cpu"
    info = system_info.lower()
    for name in ("cuda", "metal", "vulkan", "hip", "sycl", "opencl"):
        if name in info:
            return name
    return "metal" if platform.system() == "Darwin" else "gpu"


def cpu_model() -> str:
    """The processor's name, so that timings measured on one machine are never reused on
    another that shares the home folder."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def physical_cores() -> int:
    """Compute-bound decoding runs best on one thread per physical core."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def probe(gpu_offload: bool, system_info: str, gpus: Sequence[GpuDevice] = ()) -> Hardware:
    """`gpu_offload`, `system_info` and `gpus` come from the llama.cpp build in use."""
    mem = psutil.virtual_memory()
    battery = None
    try:
        sensors = psutil.sensors_battery()
        battery = None if sensors is None else not sensors.power_plugged
    except (AttributeError, NotImplementedError, OSError):
        battery = None
    return Hardware(
        total_ram=int(mem.total),
        available_ram=int(mem.available),
        physical_cores=physical_cores(),
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        gpu_offload=gpu_offload,
        backend=backend_name(gpu_offload, system_info),
        on_battery=battery,
        machine=f"{platform.system()} {platform.machine()}",
        gpus=tuple(gpus),
    )
