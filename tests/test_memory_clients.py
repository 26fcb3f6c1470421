"""Issue 63, defect 3: `--memory DIR` keeps each server client's texts apart, across restarts:
the operator's file is DIR's own, each client's is under a digest of who it is, and a DIR from
before (where every client's texts were in the one file) has them set apart at a server's start.
Writes are made on a thread of their own, never in the pass's lock."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from edgespec.api import Speculator
from edgespec.auto.index import SuffixMemory
from edgespec.auto.prior import CostModel
from edgespec.server.app import create_app
from edgespec.text.project_memory import ProjectMemory, Writer, set_apart_unattributed
from tests.fakes import FakeTextModel

LOCAL = "http://127.0.0.1:8080"
COSTS = CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2)

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


KEYS = ["alice-key", "mallory-key"]
ASK = {"messages": [{"role": "user", "content": "abcabcabdab"}], "max_tokens": 40, "temperature": 0}


def server(folder: Path) -> TestClient:
    """A server of fake models whose --memory is `folder`, with a key each for two clients."""
    spec = Speculator(FakeTextModel(seed=4, n_ctx=512), None)
    memory = ProjectMemory(folder, "model")
    spec.enable_auto(
        CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False, memory=memory
    )
    return TestClient(create_app(spec, model_names=["fake"], api_keys=KEYS), base_url=LOCAL)


def drafting(client: TestClient, key: str) -> dict[str, Any]:
    res = client.post("/v1/chat/completions", json=ASK, headers={"authorization": f"Bearer {key}"})
    assert res.status_code == 200, res.text
    return dict(res.json()["edgespec"]["drafters"])


def written(folder: Path, key: str) -> list[list[int]]:
    """What the memory holds of `key`'s client, once its writer has written it."""
    client = (hashlib.sha256(f"Bearer {key}".encode()).hexdigest(), "")
    for _ in range(500):
        if docs := ProjectMemory(folder, "model").load(client):
            return docs
        time.sleep(0.01)
    return []


def test_a_clients_texts_stay_its_own_across_a_restart(tmp_path: Path) -> None:
    # Issue 63: every client's text went into the one file, and after a restart every client
    # drafted from all of it (a guess at another's prompt had its drafts accepted).
    with server(tmp_path / "fresh") as c:
        first = drafting(c, "mallory-key")
    with server(tmp_path / "memory") as c:
        drafting(c, "alice-key")
    assert written(tmp_path / "memory", "alice-key")
    assert ProjectMemory(tmp_path / "memory", "model").load() == []  # the operator's: untouched
    with server(tmp_path / "memory") as c:  # restarted
        mallory = drafting(c, "mallory-key")
        alice = drafting(c, "alice-key")
    assert mallory == first  # as if Alice had never asked
    assert alice != first  # Alice drafts from her own answer of the run before


def test_a_keys_throwaway_users_push_out_only_its_own_sessions() -> None:
    # Issue 63: 65 throwaway `user`s evicted every other client's drafting session.
    memory = SuffixMemory()
    alice = ("alice-key", "")
    memory.add(alice, [1, 2, 3, 4])
    for n in range(3 * memory.config.clients):
        memory.add(("mallory-key", f"throwaway-{n}"), [5, 6, 7, 8])
    assert alice in memory._sessions and memory.session(alice).own.tokens == 4


def test_a_clients_earlier_texts_are_read_outside_the_passes_lock(tmp_path: Path) -> None:
    folder = tmp_path / "memory"
    alice = (hashlib.sha256(b"Bearer alice-key").hexdigest(), "")
    ProjectMemory(folder, "model").add([0, 1, 2, 0, 1, 2], alice)
    spec = Speculator(FakeTextModel(seed=4, n_ctx=512, sequences=2), None)
    memory = ProjectMemory(folder, "model")
    held: list[bool] = []
    real = memory.load

    def watched(client: Hashable = None) -> list[list[int]]:
        if client is not None:  # a client's own texts, not the operator's (read at loading)
            held.append(app.state.worker.batch.lock._owner == threading.get_ident())
        return real(client)

    memory.load = watched  # type: ignore[method-assign]
    spec.enable_auto(
        CostModel({1: 1.0, 2: 1.1, 8: 1.4, 16: 2.0}, 0.2), use_model=False, memory=memory
    )
    app = create_app(spec, model_names=["fake"], api_keys=KEYS, slots=2)
    with TestClient(app, base_url=LOCAL) as c:
        drafting(c, "alice-key")
    assert held == [False]
