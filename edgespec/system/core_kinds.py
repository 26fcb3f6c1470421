"""Which cores are efficiency cores, asked of the CPU or the OS where the kernel's sysfs does not
say: x86's CPUID on each logical CPU (as llama.cpp's `common_cpu_get_num_math` asks it: WSL2,
virtual machines, kernels without the hybrid PMU's `cpu_core` node) and Windows' processor
records (`GetLogicalProcessorInformationEx`, each core's EfficiencyClass)."""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
from collections.abc import Iterable
from functools import cache
from typing import Any

Registers = tuple[int, int, int, int]  # eax, ebx, ecx, edx

# cpuid(leaf: edi, subleaf: esi, out: rdx) for the System V x86-64 ABI: push rbx; mov r8, rdx;
# mov eax, edi; mov ecx, esi; cpuid; the four registers to out[0..3]; pop rbx; ret.
_CPUID_CODE = bytes.fromhex("53 4989d0 89f8 89f1 0fa2 418900 41895804 41894808 4189500c 5b c3")
_Out = ctypes.c_uint32 * 4
_ATOM = 0x20  # CPUID leaf 0x1A's core type of an efficiency core (Intel's "Atom")
_HYBRID_BIT = 1 << 15  # CPUID leaf 7's EDX: the chip has cores of more than one type


@cache
def _cpuid_function() -> Any:
    """The CPUID instruction as a C function, from one executable page; None where the system
    refuses writable code (then the core kinds stay unknown)."""
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError, AttributeError):
        return None
    page.write(_CPUID_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    function = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(_Out))
    return function(address), page  # the page stays mapped as long as the function lives


def query(leaf: int, subleaf: int = 0) -> Registers | None:
    """CPUID on the logical CPU this thread runs on; None where it cannot be run."""
    found = _cpuid_function()
    if found is None:
        return None
    out = _Out()
    found[0](leaf, subleaf, ctypes.byref(out))
    return out[0], out[1], out[2], out[3]


def _kernel_says_hybrid() -> bool:
    """Whether the kernel's CPU flags hold `hybrid_cpu` (read from CPUID at boot): the code page
    above runs only on such a chip, never on the many that are not hybrid."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            return any(
                line.startswith("flags") and "hybrid_cpu" in line.split() for line in cpuinfo
            )
    except OSError:
        return False


def efficiency_cpus(cpus: Iterable[int]) -> set[int] | None:
    """Of `cpus`, those whose CPUID says they are efficiency cores, each asked while this
    thread is pinned to it; None where the chip is not hybrid or cannot be asked (x86-64
    Linux only: elsewhere the OS says, or a thread cannot be pinned)."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if not x86 or not hasattr(os, "sched_getaffinity") or not _kernel_says_hybrid():
        return None
    top, hybrid = query(0), query(7)
    if top is None or hybrid is None or top[0] < 0x1A or not hybrid[3] & _HYBRID_BIT:
        return None
    allowed = os.sched_getaffinity(0)
    found = set()
    try:
        for cpu in sorted(set(cpus) & allowed):
            os.sched_setaffinity(0, {cpu})
            kind = query(0x1A)
            if kind is not None and kind[0] >> 24 == _ATOM:
                found.add(cpu)
    except OSError:
        return None
    finally:
        os.sched_setaffinity(0, allowed)
    return found


# Windows' LOGICAL_PROCESSOR_RELATIONSHIP RelationProcessorCore, and the offsets of the fields
# read in a SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX record of that kind.
RELATION_PROCESSOR_CORE = 0
_SIZE_AT, _EFFICIENCY_AT = 4, 9


def _kernel32() -> Any:
    return ctypes.WinDLL("kernel32")  # type: ignore[attr-defined]


def windows_core_classes() -> list[int] | None:
    """Each physical core's EfficiencyClass (higher: faster; all 0 where the cores are alike),
    from Windows' processor records; None where they cannot be read."""
    try:
        kernel32 = _kernel32()
        size = ctypes.c_uint32(0)
        kernel32.GetLogicalProcessorInformationEx(RELATION_PROCESSOR_CORE, None, ctypes.byref(size))
        if not size.value:
            return None
        buffer = ctypes.create_string_buffer(size.value)
        if not kernel32.GetLogicalProcessorInformationEx(
            RELATION_PROCESSOR_CORE, buffer, ctypes.byref(size)
        ):
            return None
    except (OSError, AttributeError):
        return None
    return _core_classes(buffer.raw[: size.value])


def _core_classes(records: bytes) -> list[int] | None:
    classes, at = [], 0
    while at + _EFFICIENCY_AT < len(records):
        relationship, size = struct.unpack_from("<II", records, at)
        if size <= _EFFICIENCY_AT:
            return None
        if relationship == RELATION_PROCESSOR_CORE:
            classes.append(records[at + _EFFICIENCY_AT])
        at += size
    return classes or None
