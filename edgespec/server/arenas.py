"""A cap on glibc's malloc arenas for the server's process: glibc gives each new thread that
allocates an arena of its own (up to 8 per core) and keeps what is freed in each, and the
server allocates from many threads, so without a cap its memory grew under load
(measured: docs/tuning.md, Malloc arenas)."""

from __future__ import annotations

import ctypes
import os
import sys

SERVE_ARENAS = 2  # measured: docs/tuning.md, Malloc arenas
# mallopt's parameter number for the arena cap (malloc.h: M_ARENA_MAX).
_M_ARENA_MAX = -8


def cap_malloc_arenas(n: int = SERVE_ARENAS) -> bool:
    """At most `n` malloc arenas from now on, where the C library is glibc; True if set. Call it
    before the process starts threads; a MALLOC_ARENA_MAX the user set is kept."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    # gnu_get_libc_version is glibc's own: musl has neither it nor M_ARENA_MAX.
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, n))
