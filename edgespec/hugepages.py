"""The weights on transparent huge pages, where Linux gives them on request.

Decoding on a CPU reads every weight once per token; on 4 KB pages a 1 GB model spans 260,000
pages, far more than the TLB covers, and each miss walks the page tables. On 2 MB pages the
1.5B target decoded 8-18 % faster on a 2-core EPYC (docs/benchmarks.md). Linux gives huge pages
to memory that asks for them (`madvise(MADV_HUGEPAGE)`) where THP is in its "madvise" mode, the
usual default; in "always" mode they come anyway, in "never" not at all.

llama.cpp reads the weights into buffers it allocated (edgespec does not map the file, see
`LlamaModel`), and calls the load's progress callback before each tensor: the first call
advises every large anonymous mapping, the buffers just allocated among them, so the weights
fault in as 2 MB pages. On some virtual machines a huge page's first touch costs 20 ms (the load
of the 1.5B target took 11-15 s instead of 1.6 s): a load that runs slower than MIN_RATE once
CHECK_AFTER bytes are in withdraws the advice for the rest, so such a machine pays at most the
first CHECK_AFTER bytes' worth.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
PROC_MAPS = Path("/proc/self/maps")
MADV_HUGEPAGE, MADV_NOHUGEPAGE = 14, 15  # Linux's; Python's mmap has them on Linux only
MIN_MAPPING = 16 << 20  # smaller anonymous mappings are not weight buffers
CHECK_AFTER = 128 << 20  # bytes loaded before the load's speed is judged
# Reading a file from the page cache into memory runs at 1-1.5 GB/s on the 2-core machines
# here, also with huge pages where they are cheap; 20 ms per 2 MB page is 100 MB/s.
MIN_RATE = 300e6  # bytes per second


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's THP mode ("always", "madvise" or "never"); None where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


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
    """A progress callback for a llama.cpp load of `total` bytes that puts what it allocated on
    huge pages, and withdraws the advice where faulting them in turns out slow (`guard`)."""

    def __init__(
        self, total: int, *, guard: bool = True, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.total = total
        self.guard = guard
        self._clock = clock
        self.regions: list[tuple[int, int]] = []
        self.withdrawn = False
        self._started: float | None = None

    def __call__(self, progress: float) -> bool:
        now = self._clock()
        if self._started is None:
            self._started = now
            with contextlib.suppress(OSError):  # no /proc: nothing advised, the load goes on
                self.regions = large_anonymous_mappings(PROC_MAPS.read_text())
            _madvise(self.regions, MADV_HUGEPAGE)
        done = progress * self.total
        slow = done < MIN_RATE * (now - self._started)
        if self.guard and not self.withdrawn and done >= CHECK_AFTER and slow:
            _madvise(self.regions, MADV_NOHUGEPAGE)
            self.withdrawn = True
        return True  # go on loading


def available() -> bool:
    """Whether advising makes a difference: Linux in THP's "madvise" mode."""
    return sys.platform == "linux" and thp_mode() == "madvise"
