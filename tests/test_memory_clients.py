"""Issue 63, defect 3: `--memory DIR` keeps each server client's texts apart, across restarts:
the operator's file is DIR's own, each client's is under a digest of who it is, and a DIR from
before (where every client's texts were in the one file) has them set apart at a server's start.
Writes are made on a thread of their own, never in the pass's lock."""

from __future__ import annotations

import threading
from pathlib import Path

from edgespec.text.project_memory import ProjectMemory, Writer, set_apart_unattributed

ALICE = ("digest-of-alice-key", "")
MALLORY = ("digest-of-mallory-key", "")


def test_each_client_has_its_own_file_and_the_operator_hers(tmp_path: Path) -> None:
    memory = ProjectMemory(tmp_path, "model")
    memory.add([1, 2, 3])
    memory.add([4, 5], ALICE)
    memory.add([6, 7], MALLORY)
    again = ProjectMemory(tmp_path, "model")  # a restart
    assert again.load() == [[1, 2, 3]]
    assert again.load(ALICE) == [[4, 5]] and again.load(MALLORY) == [[6, 7]]
    assert again.client_path(ALICE) != again.client_path(MALLORY)
    assert "alice" not in str(again.client_path(ALICE))  # a digest, not the client's name


def test_a_dir_from_before_has_its_texts_set_apart_once(tmp_path: Path) -> None:
    (tmp_path / "model.jsonl").write_text("[1,2,3]\n[4,5]\n")  # every client's, mixed
    moved = set_apart_unattributed(tmp_path)
    assert [p.name for p in moved] == ["model.jsonl"] and moved[0].read_text() == "[1,2,3]\n[4,5]\n"
    memory = ProjectMemory(tmp_path, "model")
    assert memory.load() == [] and memory.load(ALICE) == []
    memory.add([9, 9])  # the operator's, from now on
    assert set_apart_unattributed(tmp_path) == [] and memory.load() == [[9, 9]]


def test_a_new_dir_keeps_the_operators_texts_at_a_servers_start(tmp_path: Path) -> None:
    folder = tmp_path / "memory"
    ProjectMemory(folder, "model").add([1, 2])  # `edgespec run --memory` first
    assert set_apart_unattributed(folder) == []
    assert ProjectMemory(folder, "model").load() == [[1, 2]]


def test_writes_are_made_on_a_thread_of_their_own_and_in_order(tmp_path: Path) -> None:
    memory = ProjectMemory(tmp_path, "model")
    held = threading.Event()
    threads: list[str] = []
    real = memory.add

    def slow(doc: list[int], client: object = None) -> None:
        threads.append(threading.current_thread().name)
        held.wait(10)
        real(doc, client)  # type: ignore[arg-type]

    memory.add = slow  # type: ignore[method-assign]
    writer = Writer(memory)
    for i in range(5):
        writer.add([i, i], ALICE)  # returns at once, the file lock or not
    assert memory.load(ALICE) == []
    held.set()
    writer.flush()
    assert memory.load(ALICE) == [[i, i] for i in range(5)]
    assert set(threads) == {"edgespec-memory"}
