"""The target computed on llama.cpp RPC servers, held in a child process: llama.cpp's RPC
client aborts the process when a server goes away mid-computation, so an abort ends the child
only. The parent names the server; the draft and the conversation stay; the next call starts a
new child (from `n_past` 0) once every server answers. Requests are pickled over the child's
stdin and stdout, logits come back through a memory-mapped file both share."""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np

from edgespec.errors import EdgespecError
from edgespec.llamacpp.rpc_servers import Endpoint, RemoteError, probe, probe_all
from edgespec.options import K_MAX
from edgespec.system import settings
from edgespec.system.children import module_command

LOAD_TIMEOUT_S = 600.0  # loading sends every weight over the link
# A call that gets no answer for this long (plus a little per token) means a dead link.
CALL_TIMEOUT_S = 60.0
CALL_TIMEOUT_PER_TOKEN_S = 0.25
# A verification's rows at the largest K, shared without pickling (more come pickled). The
# child answers one sequence, so with the target on RPC servers `auto` drafts no trees.
LOGIT_ROWS = K_MAX + 1


def _write(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read(stream: IO[bytes]) -> bytes | None:
    """The next message `_write` wrote; None at the end of the stream, or in a message cut short."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    return data if len(data) == size else None


class _Replies:
    """The child's replies, read whole from its stdout by a thread of their own, so that waiting
    can time out: a pipe's read cannot, and Windows' select() takes sockets only."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._messages: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._ended = False
        self._thread = threading.Thread(
            target=self._pump, args=(stream,), name="edgespec-replies", daemon=True
        )
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        with stream, contextlib.suppress(OSError):  # an error ends the replies, as EOF does
            while (data := _read(stream)) is not None:
                self._messages.put(data)
        self._messages.put(None)  # the end

    def message(self, deadline: float) -> bytes:
        """The next length-prefixed message, taken whole or not at all: a Ctrl-C while it
        arrives leaves it for the next call. TimeoutError at `deadline`, EOFError at the end."""
        while not self._ended:
            left = deadline - time.monotonic()
            try:
                # In slices: a wait on a lock is not interrupted by Ctrl-C on Windows.
                data = self._messages.get(timeout=min(max(0.0, left), 0.25))
            except queue.Empty:
                if left <= 0:
                    raise TimeoutError from None
                continue
            if data is not None:
                return data
            self._ended = True
        raise EOFError

    def wait_closed(self, timeout: float) -> None:
        self._thread.join(timeout)


class RemoteTarget:
    """The engine's target-model protocol, answered by a LlamaModel in a child process; the
    `servers` are probed before each start (a RemoteError naming one, not an abort)."""

    warms_shapes = True  # its layers compute on the servers' devices (engine/warmup.py)

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: Any,  # edgespec.llamacpp.model.LoadOptions with `rpc` set
        servers: Sequence[Endpoint],
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.options = options
        self.servers = tuple(servers)
        self._note = note or (lambda _: None)
        self._proc: subprocess.Popen[bytes] | None = None
        self._replies: _Replies | None = None
        self._pending = False  # a request whose reply was not read (Ctrl-C while waiting)
        self._lost: str | None = None
        self._n_past = 0
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self._shared = tempfile.TemporaryFile()  # noqa: SIM115
        self._view: np.ndarray | None = None
        # One request and its reply at a time: the HTTP server tokenizes while its worker decodes.
        self._lock = threading.RLock()
        self._start()

    def _start(self) -> None:
        probe_all(self.servers)
        env = dict(os.environ, GGML_NO_BACKTRACE="1")  # no gdb attached to a dying child
        self._log.seek(0)
        self._log.truncate()
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            pass_fds=(self._shared.fileno(),),
            env=env,
            start_new_session=True,  # Ctrl-C reaches edgespec, which then stops between calls
        )
        assert self._proc.stdout is not None
        self._replies = _Replies(self._proc.stdout)
        self._pending = False
        self._lost = None
        self._n_past = 0
        info = self._call("load", str(self.path), self.options, timeout=LOAD_TIMEOUT_S)
        self.n_vocab: int = info["n_vocab"]
        self.n_ctx: int = info["n_ctx"]
        self.n_threads: int = info["n_threads"]
        size = LOGIT_ROWS * self.n_vocab * 4
        self._shared.truncate(size)
        buffer = mmap.mmap(self._shared.fileno(), size)
        self._view = np.frombuffer(buffer, dtype=np.float32).reshape(LOGIT_ROWS, self.n_vocab)
        self._call("attach", LOGIT_ROWS)

    def _command(self) -> list[str]:
        return module_command("edgespec.llamacpp.rpc_target", str(self._shared.fileno()))

    def _call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        with self._lock:
            if self._lost is not None:
                self._note(f"{self._lost}; connecting to the RPC servers again")
                self._start()
            self._settle()
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            try:
                _write(proc.stdin, (method, args, kwargs))
            except OSError:
                self._fail()
            self._pending = True
            return self._reply(CALL_TIMEOUT_S if timeout is None else timeout)

    def _reply(self, timeout: float) -> Any:
        assert self._replies is not None
        try:
            status, value, n_past = pickle.loads(self._replies.message(time.monotonic() + timeout))
        except (EOFError, OSError, TimeoutError) as e:
            self._fail(timed_out=isinstance(e, TimeoutError), after=timeout)
        self._pending = False
        self._n_past = n_past
        if status == "error":
            raise EdgespecError(value)
        return value

    def _settle(self) -> None:
        """Read the reply of a request interrupted while it waited, so the next one is in step."""
        if self._pending:
            self._reply(CALL_TIMEOUT_S)

    def _fail(self, timed_out: bool = False, after: float = 0.0) -> NoReturn:
        """The child is gone (or stuck): end it, find out which server is to blame, raise."""
        code = self._stop()
        self._n_past = 0
        self._view = None
        why = f"no answer for {after:.0f} s" if timed_out else "the connection was lost"
        culprit = self._unreachable()
        if culprit is not None:
            self._lost = f"{culprit} ({why})"
        else:
            self._lost = f"the target's process on the RPC servers ended ({why}, code {code})"
        if settings.debug():
            self._log.seek(0)
            sys.stderr.write(self._log.read().decode("utf-8", "replace")[-4000:])
        raise RemoteError(
            f"{self._lost}. The conversation is kept: the next request connects again once "
            "every server answers"
        )

    def _unreachable(self) -> str | None:
        for endpoint in self.servers:
            try:
                probe(endpoint, timeout=2.0, pings=1)
            except RemoteError as e:
                return str(e)
        return None

    def _stop(self) -> int | None:
        proc, self._proc = self._proc, None
        self._pending = False  # no child, no reply to wait for
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        code = proc.wait()
        if self._replies is not None:  # its thread closes stdout once the pipe ends
            self._replies.wait_closed(timeout=5.0)
            self._replies = None
        return code

    @property
    def n_past(self) -> int:
        with self._lock:
            self._settle()  # without a child nothing is pending (see _stop)
            return self._n_past

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        timeout = CALL_TIMEOUT_S + CALL_TIMEOUT_PER_TOKEN_S * len(tokens)
        rows = self._call("decode", list(tokens), n_logits, timeout=timeout)
        if isinstance(rows, np.ndarray):
            return rows
        assert self._view is not None
        return np.array(self._view[:rows])

    def rewind(self, n_past: int) -> None:
        self._call("rewind", n_past)

    def is_eog(self, token: int) -> bool:
        if token not in self._eog:
            self._eog[token] = bool(self._call("is_eog", token))
        return self._eog[token]

    def token_bytes(self, token: int) -> bytes:
        if token not in self._pieces:
            self._pieces[token] = bytes(self._call("token_bytes", token))
        return self._pieces[token]

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        tokens = self._call("tokenize", text, add_special=add_special, parse_special=parse_special)
        return list(tokens)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None
    ) -> list[int]:
        return list(self._call("apply_chat_template", list(messages), tools=tools))

    def render_chat(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None
    ) -> str:
        return str(self._call("render_chat", list(messages), tools=tools))

    def metadata(self) -> dict[str, str]:
        return dict(self._call("metadata"))

    @property
    def chat_template(self) -> str | None:
        template = self._call("chat_template")
        return None if template is None else str(template)

    @property
    def fim_tokens(self) -> dict[str, int]:
        return dict(self._call("fim_tokens"))

    @property
    def bos_token(self) -> int:
        return int(self._call("bos_token"))

    @property
    def eos_token(self) -> int:
        return int(self._call("eos_token"))

    def close(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is not None and proc.stdin is not None and self._lost is None:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    proc.stdin.close()  # the child ends when its input does
                    proc.wait(timeout=10)
            self._stop()
            self._log.close()
            self._shared.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown
            self.close()


# --- the child process ----------------------------------------------------------------------

_ATTRIBUTES = ("chat_template", "bos_token", "eos_token", "fim_tokens")
_METHODS = (
    "rewind",
    "is_eog",
    "token_bytes",
    "tokenize",
    "apply_chat_template",
    "render_chat",
    "metadata",
)


def _serve(shared_fd: int) -> None:
    from edgespec.llamacpp.model import LlamaModel

    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever llama.cpp prints goes to the log, never into the replies
    model: LlamaModel | None = None
    out: np.ndarray | None = None
    while (request := _read(requests)) is not None:  # until the parent closes our input
        method, args, kwargs = pickle.loads(request)
        try:
            if method == "load":
                model = LlamaModel(args[0], args[1])
                value: Any = {k: getattr(model, k) for k in ("n_vocab", "n_ctx", "n_threads")}
            elif model is None:
                raise EdgespecError("no model loaded")
            elif method == "attach":
                size = args[0] * model.n_vocab * 4
                buffer = mmap.mmap(shared_fd, size)
                out = np.frombuffer(buffer, dtype=np.float32).reshape(args[0], model.n_vocab)
            elif method == "decode":
                tokens, n_logits = args
                if out is not None and n_logits <= len(out):
                    model.decode(tokens, n_logits, out)
                    value = n_logits
                else:
                    value = model.decode(tokens, n_logits)
            elif method in _ATTRIBUTES:
                value = getattr(model, method)
            elif method in _METHODS:
                value = getattr(model, method)(*args, **kwargs)
            else:
                raise EdgespecError(f"unknown request {method!r}")
            reply = ("ok", value, model.n_past if model else 0)
        except Exception as e:  # sent to the parent, which raises it
            reply = ("error", str(e), model.n_past if model else 0)
        _write(replies, reply)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(int(sys.argv[1]))
