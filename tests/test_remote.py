"""The target's child process (`edgespec.llamacpp.rpc_target`), here a small stand-in that speaks
the same pickled protocol: calls from two threads, and a child that stops in the middle of a
reply; and what edgespec's children import."""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from edgespec.buildcheck import smoke
from edgespec.llamacpp import rpc_target as remote
from edgespec.llamacpp.rpc_servers import RemoteError

# Answers `load` and `attach` as the real child does, `tokenize` with the text's code points;
# with `stall` in the text it sends half a reply and then nothing, with `die` half and exits.
CHILD = """
import os, pickle, struct, sys, time
requests, replies = sys.stdin.buffer, sys.stdout.buffer
while (header := requests.read(8)):
    method, args, kwargs = pickle.loads(requests.read(struct.unpack("<Q", header)[0]))
    if method == "load":
        value = {"n_vocab": 4, "n_ctx": 64, "n_threads": 1}
    elif method == "tokenize":
        value = [ord(ch) for ch in args[0]]
    else:
        value = None
    data = pickle.dumps(("ok", value, 0))
    reply = struct.pack("<Q", len(data)) + data
    if method == "tokenize" and "stall" in args[0]:
        replies.write(reply[:5]); replies.flush(); time.sleep(60)
    if method == "tokenize" and "die" in args[0]:
        replies.write(reply[:5]); replies.flush(); os._exit(1)
    replies.write(reply); replies.flush()
"""


class StandIn(remote.RemoteTarget):
    def _command(self) -> list[str]:
        return [sys.executable, "-c", CHILD]


@contextmanager
def stand_in() -> Iterator[StandIn]:
    target = StandIn("unused.gguf", None, ())
    try:
        yield target
    finally:
        target.close()


def test_two_threads_each_get_their_own_replies() -> None:
    # The server tokenizes a new request while its worker decodes through the same pipe.
    wrong: list[str] = []

    def ask(name: str) -> None:
        try:
            for i in range(300):
                text = f"{name}{i}"
                if target.tokenize(text) != [ord(ch) for ch in text]:
                    wrong.append(text)
        except Exception as exc:  # a crossed reply can also break the framing
            wrong.append(repr(exc))

    with stand_in() as target:
        threads = [threading.Thread(target=ask, args=(n,), daemon=True) for n in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert not any(t.is_alive() for t in threads), "a call never got its reply"
    assert wrong == []


def test_a_reply_cut_short_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "CALL_TIMEOUT_S", 1.0)
    with stand_in() as target, pytest.raises(RemoteError, match="no answer for 1 s"):
        target.tokenize("stall")


def test_children_do_not_import_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "numpy.py").write_text("open('imported', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    unstarted = object.__new__(remote.RemoteTarget)
    with tempfile.TemporaryFile() as shared:
        unstarted._shared = shared
        for command in (unstarted._command(), smoke.child_command(tmp_path / "none.gguf")):
            subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                pass_fds=(shared.fileno(),),
                timeout=120,
                check=False,
            )
            assert not (tmp_path / "imported").exists(), command


def test_replies_are_read_without_select_on_pipes(monkeypatch: pytest.MonkeyPatch) -> None:
    # On Windows select() takes sockets only: on a pipe it fails (WSAENOTSOCK).
    def sockets_only(*args: object, **kwargs: object) -> NoReturn:
        raise OSError(10038, "An operation was attempted on something that is not a socket")

    monkeypatch.setattr(select, "select", sockets_only)
    monkeypatch.setattr(remote, "CALL_TIMEOUT_S", 1.0)
    with stand_in() as target:
        assert target.tokenize("→ pipe") == [ord(ch) for ch in "→ pipe"]
        with pytest.raises(RemoteError, match="no answer for 1 s"):
            target.tokenize("stall")
        # The next call starts a new child, whose replies are read as the first one's were.
        assert target.tokenize("again") == [ord(ch) for ch in "again"]


def test_a_child_that_dies_in_the_middle_of_a_reply_is_a_lost_connection() -> None:
    with stand_in() as target, pytest.raises(RemoteError, match="the connection was lost"):
        target.tokenize("die")
