"""Threads and the machine's name on each platform, faked where the probes read it: the platform
module, psutil, the kernel's /proc and /sys files, macOS's sysctl command, x86's CPUID on the CPU
a thread is pinned to, and Windows' processor records."""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import dataclasses
import io
import os
import platform
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from edgespec.planner.resources import choose_resources
from edgespec.system import core_kinds, device

CPUS = "/sys/devices/system/cpu"
# What the probes read; psutil's memory and battery readings pass through to this machine.
FAKED = ("/proc/cpuinfo", "/proc/device-tree/", "/sys/devices/")
REAL_OPEN, REAL_RUN = builtins.open, subprocess.run


@dataclass(frozen=True)
class Machine:
    system: str  # platform.system()
    arch: str  # platform.machine()
    processor: str  # platform.processor(): "arm" on every Apple Silicon Mac, "" on a Pi
    physical: int  # what psutil counts there
    logical: int
    files: dict[str, str] = field(default_factory=dict)  # /proc and /sys
    sysctl: dict[str, str] = field(default_factory=dict)
    core_types: dict[int, int] = field(default_factory=dict)  # CPUID 0x1A's, per CPU: hybrid
    # Windows' records of its physical cores: (EfficiencyClass, logical CPUs) each
    windows_cores: tuple[tuple[int, int], ...] = ()
    windows_cpu: str = ""  # the registry's ProcessorNameString
    gpu_cores: int | None = None  # an Apple GPU's, in the I/O registry


def mac(brand: str, performance: int, efficiency: int) -> Machine:
    cores = performance + efficiency
    values = {
        "machdep.cpu.brand_string": brand,
        "hw.physicalcpu": str(cores),
        "hw.logicalcpu": str(cores),
        "hw.nperflevels": "2",
        "hw.perflevel0.physicalcpu": str(performance),
        "hw.perflevel1.physicalcpu": str(efficiency),
    }
    return Machine("Darwin", "arm64", "arm", cores, cores, sysctl=values)


def arm_cpuinfo(parts: list[str], tail: str = "") -> str:
    """An arm64 kernel's /proc/cpuinfo: no model name, one block of numbers per core."""
    blocks = [
        f"processor\t: {cpu}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm aes pmull\n"
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\n"
        f"CPU part\t: {part}\nCPU revision\t: 1\n"
        for cpu, part in enumerate(parts)
    ]
    return "\n".join(blocks) + "\n" + tail


def one_thread_per_core(n: int) -> dict[str, str]:
    return {f"{CPUS}/cpu{cpu}/topology/thread_siblings_list": f"{cpu}\n" for cpu in range(n)}


def capacities(speeds: list[int]) -> dict[str, str]:
    return {f"{CPUS}/cpu{cpu}/cpu_capacity": f"{speed}\n" for cpu, speed in enumerate(speeds)}


def pi(model: str, part: str) -> Machine:
    files = {
        "/proc/cpuinfo": arm_cpuinfo(
            [part] * 4, f"Revision\t: d04170\nSerial\t\t: 1a2b3c4d5e6f7a8b\nModel\t\t: {model}\n"
        ),
        "/proc/device-tree/model": model + "\x00",
        f"{CPUS}/online": "0-3\n",
        **capacities([1024] * 4),
        **one_thread_per_core(4),
    }
    return Machine("Linux", "aarch64", "", 4, 4, files)


def big_little(speeds: list[int], parts: list[str], board: str | None) -> Machine:
    files = {
        "/proc/cpuinfo": arm_cpuinfo(parts),
        f"{CPUS}/online": f"0-{len(speeds) - 1}\n",
        **capacities(speeds),
        **one_thread_per_core(len(speeds)),
    }
    if board is not None:
        files["/proc/device-tree/model"] = board + "\x00"
    return Machine("Linux", "aarch64", "", len(speeds), len(speeds), files)


def x86_cpuinfo(name: str, cpus: int, hybrid: bool = False) -> str:
    flags = "fpu sse2 avx2" + (" hybrid_cpu" if hybrid else "")
    return "\n".join(
        f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 154\n"
        f"model name\t: {name}\nstepping\t: 3\nflags\t\t: {flags}\n"
        for cpu in range(cpus)
    )


# An i7-1260P: 4 P-cores with two threads each (CPUs 0-7), 8 E-cores (CPUs 8-15).
I7_1260P = Machine(
    "Linux",
    "x86_64",
    "x86_64",
    12,
    16,
    {
        "/proc/cpuinfo": x86_cpuinfo("12th Gen Intel(R) Core(TM) i7-1260P", 16, hybrid=True),
        f"{CPUS}/online": "0-15\n",
        "/sys/devices/cpu_core/cpus": "0-7\n",
        "/sys/devices/cpu_atom/cpus": "8-15\n",
        **{
            f"{CPUS}/cpu{cpu}/topology/thread_siblings_list": f"{cpu & ~1}-{cpu | 1}\n"
            for cpu in range(8)
        },
        **{f"{CPUS}/cpu{cpu}/topology/thread_siblings_list": f"{cpu}\n" for cpu in range(8, 16)},
    },
)
# The 2-core x86-64 VM the tests run on: its kernel gives both cores the same capacity.
VM = Machine(
    "Linux",
    "x86_64",
    "x86_64",
    2,
    2,
    {
        "/proc/cpuinfo": x86_cpuinfo("AMD EPYC", 2).replace("GenuineIntel", "AuthenticAMD"),
        f"{CPUS}/online": "0-1\n",
        **capacities([1024, 1024]),
        **one_thread_per_core(2),
    },
)


P_CORE, E_CORE = 0x40, 0x20  # CPUID leaf 0x1A's core types: Intel Core, Intel Atom
# The i7-1260P where the kernel has no hybrid PMU node (WSL2, a VM given every CPU): CPUID
# still tells the kinds apart, as llama.cpp's own default reads them.
I7_1260P_VM = Machine(
    "Linux",
    "x86_64",
    "x86_64",
    12,
    16,
    {
        name: text
        for name, text in I7_1260P.files.items()
        if not name.startswith(("/sys/devices/cpu_core", "/sys/devices/cpu_atom"))
    },
    core_types={cpu: P_CORE if cpu < 8 else E_CORE for cpu in range(16)},
)
# The same chip on Windows: 4 P-cores (class 1) of two threads, 8 E-cores (class 0) of one.
I7_1260P_WINDOWS = Machine(
    "Windows",
    "AMD64",
    "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel",
    12,
    16,
    windows_cores=((1, 2),) * 4 + ((0, 1),) * 8,
)


def processor_records(cores: tuple[tuple[int, int], ...]) -> bytes:
    """SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX records of RelationProcessorCore (0): Size 48,
    Flags (1: SMT), EfficiencyClass, GroupCount 1 and the core's GROUP_AFFINITY mask."""
    records, cpu = b"", 0
    for efficiency, threads in cores:
        mask = ((1 << threads) - 1) << cpu
        cpu += threads
        records += struct.pack("<IIBB20xHQH6x", 0, 48, threads > 1, efficiency, 1, mask, 0)
    return records


class FakeKernel32:
    """GetLogicalProcessorInformationEx as Windows answers it: the size asked first (FALSE,
    ERROR_INSUFFICIENT_BUFFER), then the records copied into the caller's buffer."""

    def __init__(self, records: bytes) -> None:
        self.records = records

    def GetLogicalProcessorInformationEx(self, relationship: int, buffer: Any, size: Any) -> int:
        assert relationship == core_kinds.RELATION_PROCESSOR_CORE
        length = size._obj
        if buffer is None or length.value < len(self.records):
            length.value = len(self.records)
            return 0
        ctypes.memmove(buffer, self.records, len(self.records))
        length.value = len(self.records)
        return 1


def fake_cpuid(monkeypatch: pytest.MonkeyPatch, machine: Machine) -> None:
    """CPUID answers for the CPU the thread is pinned to; an x86 chip without core types has
    leaf 0x10 at most and no hybrid bit."""
    pinned = {"cpus": set(range(machine.logical))}

    def query(leaf: int, subleaf: int = 0) -> core_kinds.Registers:
        hybrid = bool(machine.core_types)
        if leaf == 0:
            return (0x20 if hybrid else 0x10, 0, 0, 0)
        if leaf == 7:
            return (0, 0, 0, (1 << 15) if hybrid else 0)
        if leaf == 0x1A and hybrid:
            (cpu,) = pinned["cpus"]  # asked of one CPU at a time
            return (machine.core_types[cpu] << 24, 0, 0, 0)
        return (0, 0, 0, 0)

    def setaffinity(pid: int, cpus: Any) -> None:
        assert pid == 0
        pinned["cpus"] = set(cpus)

    monkeypatch.setattr(core_kinds, "query", query)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(pinned["cpus"]), raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", setaffinity, raising=False)
    monkeypatch.setattr(
        core_kinds, "_kernel32", lambda: FakeKernel32(processor_records(machine.windows_cores))
    )


def fake(monkeypatch: pytest.MonkeyPatch, machine: Machine) -> None:
    """Make this process see `machine`: its CPU files under /proc and /sys and no others, its
    sysctl values (no sysctl where it is not a Mac), its platform names and psutil's counts."""

    def open_(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        name = str(path)
        if not name.startswith(FAKED):
            return REAL_OPEN(path, mode, *args, **kwargs)
        if name not in machine.files:
            raise FileNotFoundError(2, "No such file or directory", name)
        text = machine.files[name]
        return io.BytesIO(text.encode()) if "b" in mode else io.StringIO(text)

    def run(args: Any, *rest: Any, **kwargs: Any) -> Any:
        if isinstance(args, list) and Path(args[0]).name == "ioreg":
            return ioreg(args)
        if not (isinstance(args, list) and Path(args[0]).name == "sysctl"):
            return REAL_RUN(args, *rest, **kwargs)
        if machine.system != "Darwin":
            raise FileNotFoundError(2, "No such file or directory", args[0])
        name = args[-1]
        if name in machine.sysctl:
            return subprocess.CompletedProcess(args, 0, machine.sysctl[name] + "\n", "")
        return subprocess.CompletedProcess(args, 1, "", f"sysctl: unknown oid '{name}'\n")

    def ioreg(args: list[str]) -> Any:
        if machine.system != "Darwin":
            raise FileNotFoundError(2, "No such file or directory", args[0])
        entry = "+-o AGXAcceleratorG13X  <class AGXAcceleratorG13X, id 0x100000301>\n  {\n"
        if machine.gpu_cores is not None:
            entry += f'    "gpu-core-count" = {machine.gpu_cores}\n'
        return subprocess.CompletedProcess(args, 0, entry + '    "model" = "Apple"\n  }\n', "")

    def cpu_count(logical: bool = True) -> int:
        return machine.logical if logical else machine.physical

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(platform, "system", lambda: machine.system)
    monkeypatch.setattr(platform, "machine", lambda: machine.arch)
    monkeypatch.setattr(platform, "processor", lambda: machine.processor)
    monkeypatch.setattr(psutil, "cpu_count", cpu_count)
    fake_cpuid(monkeypatch, machine)
    monkeypatch.setitem(sys.modules, "winreg", FakeWinreg(machine) if machine.windows_cpu else None)


class FakeWinreg:
    """The registry's one value read: HKLM's CentralProcessor\\0 ProcessorNameString (padded
    with spaces, as Windows writes it)."""

    HKEY_LOCAL_MACHINE = 0x80000002
    KEY = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"

    def __init__(self, machine: Machine) -> None:
        self.name = machine.windows_cpu

    def OpenKey(self, root: int, key: str) -> Any:
        if (root, key) != (self.HKEY_LOCAL_MACHINE, self.KEY):
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return contextlib.nullcontext(key)

    def QueryValueEx(self, key: str, name: str) -> tuple[str, int]:
        if name != "ProcessorNameString":
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return self.name + "    ", 1


def decoding_threads(infos: Any) -> tuple[int, int]:
    """The threads the plan chooses and those a model loaded without a plan gets."""
    from edgespec.llamacpp.model import LoadOptions, _context_params

    t, d = infos
    planned = choose_resources(device.probe(False, ""), t, d).n_threads
    return planned, _context_params(LoadOptions()).n_threads


def test_an_m1_decodes_on_its_4_performance_cores(infos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake(monkeypatch, mac("Apple M1", performance=4, efficiency=4))
    assert decoding_threads(infos) == (4, 4)


def test_a_mac_without_performance_levels_uses_every_core(infos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """macOS 11 and Intel Macs before macOS 12 have no hw.perflevel0."""
    intel = Machine("Darwin", "x86_64", "i386", 6, 12, sysctl={"hw.physicalcpu": "6"})
    fake(monkeypatch, intel)
    assert decoding_threads(infos) == (6, 6)


def test_an_i7_1260p_decodes_on_its_4_p_cores(infos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake(monkeypatch, I7_1260P)
    assert decoding_threads(infos) == (4, 4)


@pytest.mark.parametrize("machine", [I7_1260P_VM, I7_1260P_WINDOWS], ids=["vm", "windows"])
def test_an_i7_1260p_without_the_sysfs_node_decodes_on_its_4_p_cores(  # type: ignore[no-untyped-def]
    infos, monkeypatch, machine: Machine
) -> None:
    """Without /sys/devices/cpu_core the kinds come from CPUID (pinned to each CPU in turn, the
    thread's own CPUs given back) or from Windows' EfficiencyClass: not 12 threads, 4."""
    fake(monkeypatch, machine)
    assert decoding_threads(infos) == (4, 4)
    assert os.sched_getaffinity(0) == set(range(16))


def test_cpuid_code_runs_only_where_the_kernel_says_hybrid(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The executable CPUID page is never made on a chip whose kernel flags lack `hybrid_cpu`
    (the VM this runs on, most machines): the kinds are then not asked at all."""
    fake(monkeypatch, VM)

    def refuse(leaf: int, subleaf: int = 0) -> core_kinds.Registers:
        raise AssertionError(f"CPUID leaf {leaf:#x} asked of a chip that is not hybrid")

    monkeypatch.setattr(core_kinds, "query", refuse)
    assert core_kinds.efficiency_cpus({0, 1}) is None


def test_a_chip_without_core_types_keeps_every_core(infos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A Windows PC whose cores share one EfficiencyClass, and an x86 VM whose CPUID has no
    hybrid bit, decode on every physical core."""
    alike = Machine("Windows", "AMD64", "AMD64 Family 25", 8, 16, windows_cores=((0, 2),) * 8)
    for machine, threads in ((alike, 8), (VM, 2)):
        fake(monkeypatch, machine)
        assert decoding_threads(infos) == (threads, threads)


def test_cpuid_runs_here() -> None:
    """The CPUID stub on this machine's own CPU: leaf 0 names its vendor as /proc/cpuinfo does."""
    if platform.machine() != "x86_64" or not Path("/proc/cpuinfo").exists():
        pytest.skip("CPUID is asked on x86-64 Linux only")
    regs = core_kinds.query(0)
    assert regs is not None
    vendor = struct.pack("<III", regs[1], regs[3], regs[2]).decode()
    assert f"vendor_id\t: {vendor}" in Path("/proc/cpuinfo").read_text()


def test_a_pi_5_decodes_on_its_4_cores(infos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake(monkeypatch, pi("Raspberry Pi 5 Model B Rev 1.0", "0xd0b"))
    assert decoding_threads(infos) == (4, 4)


@pytest.mark.parametrize(
    ("speeds", "threads"),
    [
        # Two big cores beside six at half their speed: the little ones are left out.
        ([512] * 6 + [1024] * 2, 2),
        # A phone's one prime core, four middle ones and three little: the middle ones count.
        ([340] * 3 + [850] * 4 + [1024], 5),
    ],
)
def test_big_little_decodes_on_the_cores_above_half_the_fastest_speed(  # type: ignore[no-untyped-def]
    infos, monkeypatch, speeds: list[int], threads: int
) -> None:
    fake(monkeypatch, big_little(speeds, ["0xd05"] * len(speeds), board=None))
    assert decoding_threads(infos) == (threads, threads)


def test_the_2_core_vm_keeps_its_2_threads_and_its_name(infos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake(monkeypatch, VM)
    assert decoding_threads(infos) == (2, 2)
    assert device.cpu_model() == "AMD EPYC"


def test_a_mac_is_named_for_its_chip(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An M1's calibration must not be reused on an M2 of as many cores."""
    from edgespec.planner.make import _calibration_key
    from tests.fakes import fake_plan

    resources, target = fake_plan().resources, tmp_path / "target.gguf"
    target.write_bytes(b"GGUF" + bytes(64))
    names, keys = [], []
    for brand in ("Apple M1", "Apple M2"):
        fake(monkeypatch, mac(brand, performance=4, efficiency=4))
        names.append(device.cpu_model())
        keys.append(_calibration_key(target, None, resources))
    assert names == ["Apple M1", "Apple M2"]
    assert keys[0] != keys[1]
    fake(monkeypatch, mac("Apple M2 Pro", performance=8, efficiency=4))
    assert device.cpu_model() == "Apple M2 Pro"


def _keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cases: Any) -> list[str]:
    """The calibration key of one target on each (machine, hardware) in `cases`."""
    from edgespec.planner.make import _calibration_key
    from tests.fakes import fake_plan

    target = tmp_path / "target.gguf"
    target.write_bytes(b"GGUF" + bytes(64))
    resources, keys = fake_plan().resources, []
    for machine, hardware in cases:
        fake(monkeypatch, machine)
        hardware = dataclasses.replace(hardware, logical_cores=machine.logical)
        keys.append(
            _calibration_key(target, None, dataclasses.replace(resources, hardware=hardware))
        )
    return keys


def test_two_gpus_behind_one_cpu_get_two_calibrations(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An RTX 3060 box and an H100 box with the same CPU (a shared home folder, a swapped card):
    each is calibrated for itself; the same card of more memory is another card."""
    from edgespec.planner import calibrate as store
    from tests.machines import cuda_pc

    cards = [
        ("NVIDIA GeForce RTX 3060", 12 << 30),
        ("NVIDIA H100 80GB HBM3", 80 << 30),
        ("NVIDIA GeForce RTX 3060", 8 << 30),
    ]
    hardware = [
        dataclasses.replace(pc, gpus=(dataclasses.replace(pc.gpus[0], description=name),))
        for name, total in cards
        for pc in [cuda_pc(total // 2, 8_000_000_000, total)]
    ]
    keys = _keys(monkeypatch, tmp_path, [(VM, h) for h in hardware])
    assert len(set(keys)) == 3
    store.save(tmp_path, keys[0], store.Calibration(0.01, {1: 1.0}))
    assert store.load_cached(tmp_path, keys[1]) is None
    # Free memory moves from run to run: it is no part of the key.
    again = dataclasses.replace(
        hardware[0], gpus=(dataclasses.replace(hardware[0].gpus[0], free=1),)
    )
    assert _keys(monkeypatch, tmp_path, [(VM, again)]) == keys[:1]


def test_apple_chips_differing_only_in_gpu_cores_get_two_calibrations(  # type: ignore[no-untyped-def]
    monkeypatch, tmp_path: Path
) -> None:
    from tests.machines import apple_mac

    chips = [dataclasses.replace(mac("Apple M1 Pro", 8, 2), gpu_cores=n) for n in (14, 16)]
    hardware = apple_mac(16 << 30, 8 << 30, 10 << 30)
    gpu = dataclasses.replace(hardware.gpus[0], description="Apple M1 Pro")
    hardware = dataclasses.replace(hardware, gpus=(gpu,))
    keys = _keys(monkeypatch, tmp_path, [(chip, hardware) for chip in chips])
    assert keys[0] != keys[1]
    assert device.gpu_identity(hardware.gpus) == ["Apple M1 Pro, 16 GPU cores"]


def test_windows_names_its_cpu_as_its_registry_does(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """platform.processor() is the same "Intel64 Family 6 Model 154" for an i5 and an i7."""
    from tests.machines import hardware

    i5 = dataclasses.replace(I7_1260P_WINDOWS, windows_cpu="12th Gen Intel(R) Core(TM) i5-1240P")
    i7 = dataclasses.replace(I7_1260P_WINDOWS, windows_cpu="12th Gen Intel(R) Core(TM) i7-1260P")
    keys = _keys(monkeypatch, tmp_path, [(i5, hardware(8 << 30)), (i7, hardware(8 << 30))])
    assert keys[0] != keys[1]
    assert device.cpu_model() == "12th Gen Intel(R) Core(TM) i7-1260P"
    fake(monkeypatch, I7_1260P_WINDOWS)  # no registry value: what platform says
    assert device.cpu_model() == "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel"


def test_a_pi_is_named_for_its_board(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    names = []
    for model, part in (
        ("Raspberry Pi 5 Model B Rev 1.0", "0xd0b"),
        ("Raspberry Pi 4 Model B Rev 1.4", "0xd08"),
    ):
        fake(monkeypatch, pi(model, part))
        names.append(device.cpu_model())
    assert names == ["Raspberry Pi 5 Model B Rev 1.0", "Raspberry Pi 4 Model B Rev 1.4"]


@pytest.mark.parametrize(
    ("board", "name"),
    [
        ("Radxa ROCK 5B", "Radxa ROCK 5B"),  # a device tree names the board
        (None, "aarch64 (0x41/0xd05, 0x41/0xd0b)"),  # without one, the cores' part numbers
    ],
)
def test_other_arm_linux_is_named_for_more_than_aarch64(
    monkeypatch: pytest.MonkeyPatch, board: str | None, name: str
) -> None:
    speeds = [400] * 4 + [1024] * 4
    fake(monkeypatch, big_little(speeds, ["0xd05"] * 4 + ["0xd0b"] * 4, board))
    assert device.cpu_model() == name


def test_the_plan_says_which_cores_decode(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgespec.cli.plan_cmd import _render_hardware

    for machine in (mac("Apple M1", performance=4, efficiency=4), VM):
        fake(monkeypatch, machine)
        _render_hardware(device.probe(False, "").as_dict())
    shown = capsys.readouterr().out
    assert "Darwin arm64 (Apple M1), 4 performance cores of 8 (8 threads)" in shown
    assert "Linux x86_64 (AMD EPYC), 2 cores (2 threads)" in shown


@pytest.mark.parametrize(
    ("battery", "expected"),
    [
        (None, None),
        (SimpleNamespace(percent=50, secsleft=3600, power_plugged=None), None),
        (SimpleNamespace(percent=50, secsleft=3600, power_plugged=True), False),
        (SimpleNamespace(percent=50, secsleft=3600, power_plugged=False), True),
    ],
)
def test_on_battery_is_unknown_where_psutil_cannot_tell(monkeypatch, battery, expected) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(psutil, "sensors_battery", lambda: battery)
    assert device.on_battery() is expected
