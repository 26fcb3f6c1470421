"""The weights on transparent huge pages, on request (EDGESPEC_HUGE_PAGES=1): decoding reads
every weight once per token, far more 4 KB pages than the TLB covers. Linux's "madvise" THP mode
gives 2 MB pages to memory that asks; the load's first progress callback advises the large
anonymous mappings, llama.cpp's weight buffers among them. Off by default: where the host backs
a huge page anew on first touch, loading is far slower for little gain (docs/tuning.md, Huge
pages)."""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Iterable
from pathlib import Path

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
PROC_MAPS = Path("/proc/self/maps")
MADV_HUGEPAGE = 14  # Linux's; Python's mmap module has it on Linux only
MIN_MAPPING = 16 << 20  # smaller anonymous mappings are not weight buffers


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's THP mode ("always", "madvise" or "never"); None where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def available() -> bool:
    """Whether advising makes a difference: Linux in THP's "madvise" mode."""
    return sys.platform == "linux" and thp_mode() == "madvise"


def large_anonymous_mappings(maps: str, min_bytes: int = MIN_MAPPING) -> list[tuple[int, int]]:
    """(start, length) of the private, writable, anonymous mappings of `min_bytes` or more."""
    found = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) != 5 or fields[1] != "rw-p":  # a sixth field names a file or [heap]
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if end - start >= min_bytes:
            found.append((start, end - start))
    return found


def _madvise(regions: Iterable[tuple[int, int]], advice: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for start, length in regions:
        libc.madvise(start, length, advice)  # a region unmapped since is no harm: EINVAL/ENOMEM


class HugePageLoad:
    """A progress callback for a llama.cpp load that puts what it allocated on huge pages."""

    def __init__(self) -> None:
        self.regions: list[tuple[int, int]] | None = None  # None: not called yet

    def __call__(self, progress: float) -> bool:
        if self.regions is None:
            self.regions = []
            with contextlib.suppress(OSError):  # no /proc: nothing advised, the load goes on
                self.regions = large_anonymous_mappings(PROC_MAPS.read_text())
            _madvise(self.regions, MADV_HUGEPAGE)
        return True  # go on loading
