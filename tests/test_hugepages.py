"""The weights' huge-page advice: which mappings it advises, and that the kernel takes it."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import pytest

from edgespec.system import hugepages

MAPS = """\
55d4c3a00000-55d4c3a21000 r--p 00000000 08:01 1234   /usr/bin/python3.11
55d4c5e00000-55d4c7e00000 rw-p 00000000 00:00 0      [heap]
7f0000000000-7f0040000000 rw-p 00000000 00:00 0
7f0040000000-7f0040100000 rw-p 00000000 00:00 0
7f0050000000-7f0060000000 r--p 00000000 00:00 0
7f0060000000-7f0070000000 rw-s 00000000 00:05 77     /dev/zero (deleted)
7f0070000000-7f0080000000 rw-p 00000000 08:01 99     /models/target.gguf
"""


def test_only_large_private_writable_anonymous_mappings_are_advised() -> None:
    # The 1 GB anonymous mapping; not the heap, a 1 MB one, a read-only one, a shared one, a
    # file's.
    assert hugepages.large_anonymous_mappings(MAPS) == [(0x7F0000000000, 1 << 30)]
    assert hugepages.large_anonymous_mappings(MAPS, min_bytes=1 << 20) == [
        (0x7F0000000000, 1 << 30),
        (0x7F0040000000, 1 << 20),
    ]


def test_the_kernel_mode_is_the_bracketed_word(tmp_path: Path) -> None:
    enabled = tmp_path / "enabled"
    enabled.write_text("always [madvise] never\n")
    assert hugepages.thp_mode(enabled) == "madvise"
    enabled.write_text("[never]\n")
    assert hugepages.thp_mode(enabled) == "never"
    assert hugepages.thp_mode(tmp_path / "missing") is None


def test_the_first_progress_call_advises_and_later_ones_do_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[list[tuple[int, int]], int]] = []
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    monkeypatch.setattr(hugepages, "_madvise", lambda *call: calls.append(call))
    monkeypatch.setattr(hugepages, "PROC_MAPS", maps)
    load = hugepages.HugePageLoad()
    assert all(load(i / 10) for i in range(11))  # True: the load goes on
    assert calls == [([(0x7F0000000000, 1 << 30)], hugepages.MADV_HUGEPAGE)]
    assert load.regions == [(0x7F0000000000, 1 << 30)]


def vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping that holds `address`, from /proc/self/smaps."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError("no mapping holds the address")


@pytest.mark.skipif(not hugepages.available(), reason="needs Linux with THP in madvise mode")
def test_the_kernel_marks_the_mapping_for_huge_pages() -> None:
    # Like llama.cpp's weight buffers: private, anonymous, untouched.
    buffer = mmap.mmap(-1, 32 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = ctypes.c_char.from_buffer(buffer)
    address = ctypes.addressof(view)
    del view  # the mapping can be closed only once nothing points into it
    try:
        assert "hg" not in vm_flags(address)
        hugepages.HugePageLoad()(0.0)
        assert "hg" in vm_flags(address)
    finally:
        buffer.close()


@pytest.mark.real
@pytest.mark.skipif(not hugepages.available(), reason="needs Linux with THP in madvise mode")
def test_a_model_loaded_on_huge_pages_has_its_weights_advised(small_model: Path) -> None:
    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    model = LlamaModel(small_model, LoadOptions(n_ctx=256, huge_pages=True))
    try:
        advice = model.huge_pages
        assert advice is not None and advice.regions
        # What the first progress call found: the weight buffers llama.cpp had just allocated.
        assert sum(length for _, length in advice.regions) >= 0.9 * small_model.stat().st_size
        assert all("hg" in vm_flags(start) for start, _ in advice.regions)
        tokens = model.tokenize("def add(a, b):", add_special=False)
        assert model.decode(tokens, 1).shape == (1, model.n_vocab)
    finally:
        model.close()
    assert LlamaModel(small_model, LoadOptions(n_ctx=256)).huge_pages is None  # not asked for
