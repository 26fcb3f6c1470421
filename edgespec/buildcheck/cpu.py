"""Instruction sets: those llama.cpp was compiled for against those this CPU and its OS run (the
OS must enable wider registers, XCR0 says which; Linux grants AMX per process). A library
compiled for something missing dies with SIGILL on first use, so they are compared first."""

from __future__ import annotations

import ctypes
import mmap
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

# Features as system_info names them: on x86-64 their CPUID (leaf, subleaf, register, bit) and
# the XCR0 state components the OS must enable.
_XCR0_AVX = 0b110  # SSE + AVX (YMM) state
_XCR0_AVX512 = 0b1110_0110  # + opmask, ZMM_Hi256, Hi16_ZMM
_XCR0_AMX = 0b11 << 17  # XTILECFG + XTILEDATA
_X86: dict[str, tuple[int, int, str, int, int]] = {
    "SSE3": (1, 0, "ecx", 0, 0),
    "SSSE3": (1, 0, "ecx", 9, 0),
    "FMA": (1, 0, "ecx", 12, _XCR0_AVX),
    "AVX": (1, 0, "ecx", 28, _XCR0_AVX),
    "F16C": (1, 0, "ecx", 29, _XCR0_AVX),
    "AVX2": (7, 0, "ebx", 5, _XCR0_AVX),
    "BMI2": (7, 0, "ebx", 8, 0),
    "AVX512": (7, 0, "ebx", 16, _XCR0_AVX512),
    "AVX512_VBMI": (7, 0, "ecx", 1, _XCR0_AVX512),
    "AVX512_VNNI": (7, 0, "ecx", 11, _XCR0_AVX512),
    "AVX_VNNI": (7, 1, "eax", 4, _XCR0_AVX),
    "AVX512_BF16": (7, 1, "eax", 5, _XCR0_AVX512),
    "AMX_INT8": (7, 0, "edx", 25, _XCR0_AMX),
}
# The same features under the names Linux gives them in /proc/cpuinfo.
_LINUX_FLAGS = {
    "SSE3": "pni", "SSSE3": "ssse3", "FMA": "fma", "AVX": "avx", "F16C": "f16c",
    "AVX2": "avx2", "BMI2": "bmi2", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni", "AVX_VNNI": "avx_vnni", "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8", "NEON": "asimd", "ARM_FMA": "asimd", "FP16_VA": "asimdhp",
    "DOTPROD": "asimddp", "SVE": "sve", "MATMUL_INT8": "i8mm",
}  # fmt: skip
# ... and under the names macOS's sysctl hw.optional gives them.
_DARWIN_SYSCTL = {
    "SSE3": "sse3", "SSSE3": "supplementalsse3", "FMA": "fma", "AVX": "avx1_0",
    "F16C": "f16c", "AVX2": "avx2_0", "BMI2": "bmi2", "AVX512": "avx512f",
    "AVX512_VNNI": "avx512vnni", "AVX512_BF16": "avx512bf16", "NEON": "neon",
    "ARM_FMA": "neon", "FP16_VA": "arm.FEAT_FP16", "DOTPROD": "arm.FEAT_DotProd",
    "MATMUL_INT8": "arm.FEAT_I8MM",
}  # fmt: skip
# Flags in system_info that are not instruction sets.
_NOT_ISA = {"LLAMAFILE", "OPENMP", "REPACK", "KLEIDIAI", "SVE_CNT", "ACCELERATE"}


@dataclass(frozen=True)
class CpuFeatures:
    """What the CPU reports, what the OS enables, and how we know."""

    source: str  # "cpuid+xcr0", "/proc/cpuinfo", "sysctl", or why nothing could be read
    known: frozenset[str]  # the features this source can tell about at all
    cpu: frozenset[str]
    os_enabled: frozenset[str]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mismatch:
    feature: str
    problem: str  # e.g. "this CPU does not have it", "the OS does not enable it"


def compiled_features(system_info: str) -> frozenset[str]:
    """The instruction sets in llama.cpp's system_info ("CPU : SSE3 = 1 | AVX = 1 | ...")."""
    found = re.findall(r"([A-Z][A-Z0-9_]*) = 1\b", system_info)
    return frozenset(name for name in found if name not in _NOT_ISA)


def _cpuid_functions() -> tuple[Callable[..., None], Callable[[], int], mmap.mmap] | None:
    """cpuid and xgetbv as machine code: /proc/cpuinfo hides what the OS disabled."""
    cpuid = bytes.fromhex(
        "53"  # push rbx (callee-saved, cpuid clobbers it)
        "4989d0"  # mov r8, rdx (the output array)
        "89f8"  # mov eax, edi (leaf)
        "89f1"  # mov ecx, esi (subleaf)
        "0fa2"  # cpuid
        "418900"  # mov [r8], eax
        "41895804"  # mov [r8+4], ebx
        "41894808"  # mov [r8+8], ecx
        "4189500c"  # mov [r8+12], edx
        "5b"  # pop rbx
        "c3"  # ret
    )
    xgetbv = bytes.fromhex(
        "31c9"  # xor ecx, ecx (XCR0)
        "0f01d0"  # xgetbv
        "48c1e220"  # shl rdx, 32
        "4809d0"  # or rax, rdx
        "c3"  # ret
    )
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, AttributeError, ValueError):
        return None  # a hardened system that forbids writable+executable memory
    page.write(cpuid + xgetbv)
    base = ctypes.addressof(ctypes.c_char.from_buffer(page))
    out = ctypes.POINTER(ctypes.c_uint32 * 4)
    cpuid_fn = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, out)(base)
    xgetbv_fn = ctypes.CFUNCTYPE(ctypes.c_uint64)(base + len(cpuid))
    return cpuid_fn, xgetbv_fn, page


def _linux_amx_permitted() -> bool | None:
    """Whether this process may use AMX tile data (Linux asks each process to request it)."""
    arch_get_xcomp_perm, arch_req_xcomp_perm, xfeature_xtiledata = 0x1022, 0x1023, 18
    sys_arch_prctl = 158
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0:
            return False
        mask = ctypes.c_uint64(0)
        if libc.syscall(sys_arch_prctl, arch_get_xcomp_perm, ctypes.byref(mask)) != 0:
            return None
        return bool(mask.value & (1 << xfeature_xtiledata))
    except (OSError, AttributeError):
        return None


def _x86_linux() -> CpuFeatures | None:
    fns = _cpuid_functions()
    if fns is None:
        return None
    cpuid_fn, xgetbv_fn, page = fns
    try:
        regs: dict[tuple[int, int], dict[str, int]] = {}
        for leaf, sub in {(spec[0], spec[1]) for spec in _X86.values()}:
            arr = (ctypes.c_uint32 * 4)()
            cpuid_fn(leaf, sub, ctypes.pointer(arr))
            regs[(leaf, sub)] = dict(zip(("eax", "ebx", "ecx", "edx"), arr, strict=True))
        osxsave = bool(regs[(1, 0)]["ecx"] >> 27 & 1)
        # xgetbv is only defined when the OS has turned XSAVE on; otherwise it is SIGILL.
        xcr0 = int(xgetbv_fn()) if osxsave else 0
    finally:
        page.close()
    cpu, enabled = set(), set()
    for name, (leaf, sub, reg, bit, xcr0_mask) in _X86.items():
        if regs[(leaf, sub)][reg] >> bit & 1:
            cpu.add(name)
            if xcr0 & xcr0_mask == xcr0_mask:
                enabled.add(name)
    notes: list[str] = []
    if "AMX_INT8" in enabled and _linux_amx_permitted() is False:
        enabled.discard("AMX_INT8")
        notes.append("Linux refused this process AMX tile data (arch_prctl)")
    return CpuFeatures(
        "cpuid+xcr0", frozenset(_X86), frozenset(cpu), frozenset(enabled), tuple(notes)
    )


def _linux_cpuinfo() -> CpuFeatures:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as exc:
        return _unknown(f"unreadable /proc/cpuinfo ({exc.strerror})")
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    # Linux lists a feature only where it can be used: the CPU's and the OS's are one here.
    have = frozenset(name for name, flag in _LINUX_FLAGS.items() if flag in flags)
    return CpuFeatures("/proc/cpuinfo", frozenset(_LINUX_FLAGS), have, have)


def _darwin_sysctl() -> CpuFeatures:
    try:
        out = subprocess.run(
            ["sysctl", "hw.optional"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return _unknown(f"sysctl failed ({exc})")
    values = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        values[key.strip().removeprefix("hw.optional.")] = value.strip()
    have = frozenset(name for name, key in _DARWIN_SYSCTL.items() if values.get(key) == "1")
    return CpuFeatures("sysctl hw.optional", frozenset(_DARWIN_SYSCTL), have, have)


def _unknown(why: str) -> CpuFeatures:
    return CpuFeatures(why, frozenset(), frozenset(), frozenset())


def detect() -> CpuFeatures:
    machine = platform.machine().lower()
    if sys.platform.startswith("linux"):
        if machine in ("x86_64", "amd64"):
            found = _x86_linux()
            if found is not None:
                return found
        return _linux_cpuinfo()
    if sys.platform == "darwin":
        return _darwin_sysctl()
    return _unknown(f"not read on {platform.system()}")


def compare(compiled: frozenset[str], features: CpuFeatures) -> tuple[Mismatch, ...]:
    """Name each instruction set the library needs that this machine will not run."""
    mismatches = []
    for name in sorted(compiled & features.known):
        if name not in features.os_enabled:
            if name in features.cpu:
                problem = "the CPU has it, but the OS does not enable it"
            else:
                problem = "this CPU does not have it"
            mismatches.append(Mismatch(name, problem))
    return tuple(mismatches)
