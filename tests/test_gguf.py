"""Hostile and broken GGUF files: every outcome is a parse or one GGUFError naming the file,
in bounded time and memory (llama.cpp's reader rules)."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path
from unittest.mock import patch

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec.models.gguf import GGUFError, _Cursor, read_gguf
from tests.conftest import edgespec_here


def realistic_header(path: Path) -> bytes:
    """A small but complete model file as the gguf package writes it: vocabulary, scalars,
    arrays, and two tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(200)])
    writer.add_token_types([1] * 200)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_context_length(2048)
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_tensor("a.weight", np.zeros((4, 8), dtype=np.float32))
    writer.add_tensor("b.weight", np.ones(16, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return realistic_header(tmp_path_factory.mktemp("gguf") / "real.gguf")


def parse(tmp_path: Path, data: bytes, *, memory: bool = True) -> None:
    """A parse or one GGUFError line, with the work and memory bounded by the file's size
    (counted, not timed: a crafted length must never make the reader loop or allocate)."""
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(data)
    with patch.object(_Cursor, "unpack", autospec=True, side_effect=_Cursor.unpack) as reads:
        if memory:
            tracemalloc.start()
        try:
            read_gguf(path)
        except GGUFError as exc:
            message = str(exc)
            assert "\n" not in message and str(path) in message
        finally:
            if memory:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
    assert reads.call_count <= len(data) + 1  # every successful read consumes a byte or more
    if memory:
        assert peak <= 16 * len(data) + 1_000_000


def test_the_original_parses(tmp_path: Path, original: bytes) -> None:
    (tmp_path / "ok.gguf").write_bytes(original)
    info = read_gguf(tmp_path / "ok.gguf")
    assert info.n_vocab == 200 and info.n_tensors == 2 and info.bos_id == 1


def mutated(original: bytes, data: st.DataObject) -> bytes:
    """The model file with up to 8 fields overwritten by edge values, sometimes cut short."""
    blob = bytearray(original)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, min(len(blob) - 1, 4000)))
        size = data.draw(st.sampled_from([1, 2, 4, 8]))
        value = data.draw(st.sampled_from([0, 1, 2, 3, 7, 9, 255, 2**32 - 1, 2**63, 2**64 - 1]))
        blob[at : at + size] = (value % 2 ** (8 * size)).to_bytes(size, "little")
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    return bytes(blob)


# 300 mutations take seconds on a slow machine: the fast tier tries 50, the real tier all 300.
@pytest.mark.parametrize(
    "examples", [50, pytest.param(300, marks=pytest.mark.real)], ids=["fast", "full"]
)
def test_mutated_headers_parse_or_fail_cleanly(
    tmp_path: Path, original: bytes, examples: int
) -> None:
    # No deadline: parse() bounds the work by counting reads and memory, never by time.
    @settings(max_examples=examples, deadline=None)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        parse(tmp_path, mutated(original, data))

    check()


def kv_file(
    tmp_path: Path, entries: bytes, n_kv: int, n_tensors: int = 0, tail: bytes = b""
) -> Path:
    path = tmp_path / "crafted.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + entries + tail)
    return path


def key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


DUPLICATE = key("x") + struct.pack("<IB", 0, 1) + key("x") + struct.pack("<IB", 0, 1)


@pytest.mark.parametrize(
    ("entries", "n_kv", "n_tensors", "tail", "message"),
    [
        (key("general.alignment") + struct.pack("<II", 4, 0), 1, 0, b"", "not a power of two"),
        (key("general.alignment") + struct.pack("<II", 4, 24), 1, 0, b"", "not a power of two"),
        (key("x") + struct.pack("<IIQ", 9, 9, 1), 1, 0, b"", "nested arrays"),
        (key("x") + struct.pack("<IQ", 8, 2**62), 1, 0, b"", "truncated at byte"),
        (key("x") + struct.pack("<IIQ", 9, 6, 2**61), 1, 0, b"", "truncated at byte"),
        (key("x") + struct.pack("<IIQ", 9, 8, 2**40), 1, 0, b"", "truncated at byte"),
        (
            key("x") + struct.pack("<IB", 0, 1) + key("x") + struct.pack("<IB", 0, 1),
            2,
            0,
            b"",
            "duplicate key 'x'",
        ),
        (key("split.count") + struct.pack("<II", 4, 2**32 - 1), 1, 0, b"", "split.count"),
        (b"", 0, 1, key("t") + struct.pack("<I", 2**31) + bytes(64), "dimensions"),
        (b"", 2**63, 0, b"", "truncated at byte"),
        (b"", 0, 2**62, b"", "truncated at byte"),
        (key("x") + struct.pack("<I", 99), 1, 0, b"", "unknown value type 99"),
    ],
)
def test_crafted_files_are_refused_with_a_reason(
    tmp_path: Path, entries: bytes, n_kv: int, n_tensors: int, tail: bytes, message: str
) -> None:
    with pytest.raises(GGUFError, match=message):
        read_gguf(kv_file(tmp_path, entries, n_kv, n_tensors, tail))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + bytes(20), "not a GGUF file"),
        (b"GGUF" + struct.pack("<I", 1) + bytes(16), "GGUF version 1 is not supported"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (b"GGUF\x03\x00", "truncated at byte 4"),
    ],
)
def test_headers_say_what_is_wrong(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFError, match=message):
        read_gguf(path)


def test_a_bad_file_is_one_line_and_exit_1(tmp_path: Path, isolated: dict[str, str]) -> None:
    path = kv_file(tmp_path, key("general.alignment") + struct.pack("<II", 4, 0), 1)
    res = edgespec_here("check", str(path), str(path), env=isolated)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"edgespec: error: {path}: general.alignment 0 is not a power of two"
    ]


@pytest.mark.real
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_real_headers_parse_or_fail_cleanly(tmp_path: Path, real_pair, data) -> None:  # type: ignore[no-untyped-def]
    # The 0.5B draft's metadata (its 151,936-token vocabulary and merges), then some tensor data.
    with open(real_pair.draft, "rb") as f:
        blob = bytearray(f.read(8_000_000))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, 4000))
        value = data.draw(st.sampled_from([0, 1, 3, 9, 255, 2**32 - 1, 2**63, 2**64 - 1]))
        blob[at : at + 8] = value.to_bytes(8, "little")
    parse(tmp_path, bytes(blob[: data.draw(st.integers(0, len(blob)))]), memory=False)
