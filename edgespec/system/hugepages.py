"""The weights on transparent huge pages, on request (EDGESPEC_HUGE_PAGES=1).

Decoding on a CPU reads every weight once per token; on 4 KB pages a 1 GB model spans 260,000
pages, far more than the TLB covers, and each miss walks the page tables. Linux gives 2 MB pages
to memory that asks for them (`madvise(MADV_HUGEPAGE)`) where THP is in its "madvise" mode, the
usual default; in "always" mode they come anyway, in "never" not at all.

llama.cpp reads the weights into buffers it allocated (edgespec does not map the file, see
`LlamaModel`), and calls the load's progress callback before each tensor: the first call
advises every large anonymous mapping, the buffers just allocated among them, so the weights
fault in as 2 MB pages.

Not the default: on the virtual machines measured here a huge page's first touch can cost
4-20 ms (the host backs it anew), so a load took 2-3 s or 11-15 s instead of 1 s, for plain
decoding 0-10 % faster and speculative decoding 2 % (benchmarks/HISTORY.md). On a machine where
huge pages are cheap to fault in, loading is faster too (0.7 s against 1.0 s here when they
were).
"""

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
    """(start, length) of the private, writable, anonymous mappings of at least `min_bytes` in
    the text of /proc/self/maps."""
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
