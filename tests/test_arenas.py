"""`serve` caps glibc's malloc arenas, seen in glibc's own report, and does nothing where the
C library is another."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from edgespec.server import arenas
from tests.conftest import ROOT

# Four threads alive at once, each allocating (64 KB: below glibc's mmap threshold, so from an
# arena), then glibc's malloc_info: one <heap> per arena.
COUNT_ARENAS = """
import ctypes, sys, tempfile, threading
from edgespec.server.arenas import cap_malloc_arenas
if sys.argv[1] == "cap":
    assert cap_malloc_arenas(2)
together = threading.Barrier(5)
def allocate():
    block = bytearray(65536)
    together.wait()
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads:
    t.start()
together.wait()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    f = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    print(open(out.name).read().count("<heap nr="))
together.wait()
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's arenas")


def arenas_with(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", COUNT_ARENAS, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(out.stdout)


@glibc
def test_the_cap_holds_the_arenas_of_threads_that_allocate_at_once() -> None:
    assert arenas_with("no cap") >= 5  # the main thread's and one per thread
    assert arenas_with("cap") <= 2


def test_elsewhere_or_when_the_user_chose_it_nothing_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(arenas.ctypes, "CDLL", lambda *a: pytest.fail("libc was called"))
    monkeypatch.setattr(arenas.sys, "platform", "darwin")
    assert arenas.cap_malloc_arenas() is False
    monkeypatch.setattr(arenas.sys, "platform", "linux")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert arenas.cap_malloc_arenas() is False


def test_a_libc_without_mallopt_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    class Musl:  # has malloc, but neither glibc's version call nor mallopt
        malloc = object()

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(arenas.sys, "platform", "linux")
    monkeypatch.setattr(arenas.ctypes, "CDLL", lambda *a: Musl())
    assert arenas.cap_malloc_arenas() is False
