"""What the device offers: memory, cores, GPU offload, power."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from edgespec.system import core_kinds

CPUS = "/sys/devices/system/cpu"


@dataclass(frozen=True)
class GpuDevice:
    """A GPU as llama.cpp's ggml sees it (`ggml_backend_dev_memory` and friends)."""

    name: str  # ggml's name for it: CUDA0, MTL0, Vulkan0, ...
    description: str
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
    performance_cores: int | None = None  # decoding's default threads; None: not probed
    gpus: tuple[GpuDevice, ...] = ()

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


def _read(path: str) -> str | None:
    """A kernel file's text, None where this machine has no such file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _run(args: list[str]) -> subprocess.CompletedProcess[str] | None:
    """A system tool's run, its output as text; None where it could not run."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def sysctl(name: str) -> str | None:
    """One of macOS's sysctl values as text, None where it has no such name."""
    # By its full path: the PATH of a launchd job or a stripped shell may lack /usr/sbin.
    done = _run(["/usr/sbin/sysctl", "-n", name])
    if done is None:
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value else None


def _number(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def _cpu_list(text: str | None) -> set[int]:
    """The CPUs a kernel CPU list such as "0-3,8,10-11" names; none where it is unreadable."""
    cpus: set[int] = set()
    try:
        for part in (text or "").strip().split(","):
            if part:
                first, _, last = part.partition("-")
                cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        return set()
    return cpus


def _arm_cores(cpuinfo: str) -> list[str]:
    """The distinct "implementer/part" pairs of an Arm CPU's cores."""
    cores: list[str] = []
    implementer = "?"
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "CPU implementer":
            implementer = value.strip()
        elif key.strip() == "CPU part" and f"{implementer}/{value.strip()}" not in cores:
            cores.append(f"{implementer}/{value.strip()}")
    return cores


def _windows_cpu_name() -> str | None:
    """The name Windows shows for the CPU ("12th Gen Intel(R) Core(TM) i7-1260P"), where
    platform.processor() says only "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel"."""
    try:
        import winreg

        key = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, key) as cpu:  # type: ignore[attr-defined]
            name = winreg.QueryValueEx(cpu, "ProcessorNameString")[0]  # type: ignore[attr-defined]
    except (ImportError, OSError):
        return None
    return str(name).strip() or None


def cpu_model() -> str:
    """The chip's name (or the board's, where that names the chip), so that one machine's
    timings are never reused on another that shares the home folder."""
    if platform.system() == "Darwin":
        brand = sysctl("machdep.cpu.brand_string")
        if brand:
            return brand
    if platform.system() == "Windows":
        name = _windows_cpu_name()
        if name:
            return name
    cpuinfo = _read("/proc/cpuinfo") or ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    # The Pi's "Model" line first: its kernels name no chip, or the same one for several boards.
    for key in ("Model", "model name", "Hardware", "cpu model"):
        if fields.get(key):
            return fields[key]
    board = (_read("/proc/device-tree/model") or "").strip("\x00\n ")
    if board:
        return board
    cores = _arm_cores(cpuinfo)
    if cores:
        return f"{platform.machine()} ({', '.join(cores)})"
    return platform.processor() or platform.machine()


def apple_gpu_cores() -> int | None:
    """The GPU cores of an Apple chip, which its name does not tell (an M1 Pro has 14 or 16):
    the `gpu-core-count` of its AGXAccelerator in the I/O registry."""
    done = _run(["/usr/sbin/ioreg", "-rc", "AGXAccelerator", "-d", "1"])
    if done is None:
        return None
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip().strip('"') == "gpu-core-count":
            return _number(value)
    return None


def gpu_identity(gpus: Sequence[GpuDevice]) -> list[str]:
    """What tells these GPUs apart from others behind the same CPU: their names, a card's own
    memory (an RTX 3060 of 8 or 12 GB) and an Apple GPU's cores. A unified GPU's memory is
    left out: it is a share of the RAM that settings move."""
    cores = apple_gpu_cores() if platform.system() == "Darwin" and gpus else None
    named = []
    for gpu in gpus:
        name = gpu.description or gpu.name
        if not gpu.unified:
            name += f", {gpu.total >> 20} MiB"
        elif cores:
            name += f", {cores} GPU cores"
        named.append(name)
    return named


def physical_cores() -> int:
    """Every physical core, whatever its kind."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def _fastest_cpus(online: set[int]) -> set[int]:
    """The logical CPUs of the fastest kind, as the kernel tells kinds apart (else all)."""
    # Intel's hybrid chips (Alder Lake and later): the P-cores' CPUs, E-cores under cpu_atom.
    big = _cpu_list(_read("/sys/devices/cpu_core/cpus")) & online
    if big:
        return big
    # The same chips where the kernel has no such node (WSL2, virtual machines): CPUID.
    efficient = core_kinds.efficiency_cpus(online)
    if efficient and efficient != online:
        return online - efficient
    # Arm's big.LITTLE and its successors: each core's relative speed, the fastest at 1024.
    capacity = {cpu: _number(_read(f"{CPUS}/cpu{cpu}/cpu_capacity")) or 0 for cpu in online}
    if not online or not all(capacity.values()):
        return online
    fastest = max(capacity.values())
    # A choice: cores at more than half the fastest one's speed count (a phone's middle cluster).
    return {cpu for cpu, speed in capacity.items() if 2 * speed > fastest}


def _physical_of(cpus: set[int]) -> int:
    """How many physical cores these logical CPUs are: SMT siblings count once."""
    siblings = f"{CPUS}/cpu{{}}/topology/thread_siblings_list"
    cores = {frozenset(_cpu_list(_read(siblings.format(cpu)))) or frozenset({cpu}) for cpu in cpus}
    return len(cores)


def performance_cores() -> int:
    """The physical cores of the fastest kind, decoding's default threads: llama.cpp's threads
    run in lockstep, so an efficiency core would hold the others up at each step."""
    system = platform.system()
    if system == "Darwin":
        for name in ("hw.perflevel0.physicalcpu", "hw.physicalcpu"):
            cores = _number(sysctl(name))
            if cores:
                return cores
    elif system in ("Linux", "Android"):
        online = _cpu_list(_read(f"{CPUS}/online"))
        fastest = _fastest_cpus(online)
        if fastest and fastest != online:
            return _physical_of(fastest)
    elif system == "Windows":
        classes = core_kinds.windows_core_classes()
        if classes and min(classes) != max(classes):
            return classes.count(max(classes))
    return physical_cores()


def cores_text(physical: int, performance: int | None) -> str:
    """'8 cores', or '4 performance cores of 8' where only the fastest kind decodes."""
    if performance is None or performance >= physical:
        return f"{physical} cores"
    return f"{performance} performance cores of {physical}"


def on_battery() -> bool | None:
    """Whether the machine runs on its battery; None where the platform cannot tell."""
    try:
        battery = psutil.sensors_battery()
    except (AttributeError, NotImplementedError, OSError):  # no such sensor API here
        return None
    if battery is None or battery.power_plugged is None:  # psutil: None where it cannot tell
        return None
    return not battery.power_plugged


def probe(gpu_offload: bool, system_info: str, gpus: Sequence[GpuDevice] = ()) -> Hardware:
    """`gpu_offload`, `system_info` and `gpus` come from the llama.cpp build in use."""
    mem = psutil.virtual_memory()
    return Hardware(
        total_ram=int(mem.total),
        available_ram=int(mem.available),
        physical_cores=physical_cores(),
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        gpu_offload=gpu_offload,
        backend=backend_name(gpu_offload, system_info),
        on_battery=on_battery(),
        machine=f"{platform.system()} {platform.machine()} ({cpu_model()})",
        performance_cores=performance_cores(),
        gpus=tuple(gpus),
    )
