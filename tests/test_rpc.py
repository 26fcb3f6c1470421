"""`--rpc`: the target on llama.cpp RPC servers, the draft here.

Fast tier: address checks, the handshake against a fake server (reachable, other version, closed
at the handshake, refused), the planner's server-memory rule, the KV mirror following a target
that lost its cache. Real tier (`real`): two `ggml-rpc-server` processes on loopback, started and
stopped here, the target split across them, directly and through the delay proxy.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import psutil
import pytest

from edgespec.api import DecodeOptions, Speculator
from edgespec.engine.cache import CachedModel
from edgespec.errors import ConfigError
from edgespec.llamacpp import rpc_servers
from edgespec.llamacpp.rpc_servers import (
    PROTOCOL,
    Endpoint,
    RemoteError,
    parse_servers,
    probe,
    split,
)
from tests.conftest import ROOT, RealPair, closed_port, edgespec, edgespec_here

# --- addresses ------------------------------------------------------------------------------


def test_addresses_parse() -> None:
    assert parse_servers("192.168.1.20:50052, pi.local:50053,[::1]:7") == (
        Endpoint("192.168.1.20", 50052),
        Endpoint("pi.local", 50053),
        Endpoint("::1", 7),
    )
    assert str(Endpoint("::1", 7)) == "[::1]:7"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("localhost", "is not HOST:PORT"),
        (":50052", "is not HOST:PORT"),
        ("a:b:50052", "is not HOST:PORT"),
        ("[::1:50052", "is not [IPV6]:PORT"),
        ("[nonsense]:1", "is not [IPV6]:PORT"),
        ("host:port", "is not a number"),
        ("host:-1", "is not a number"),
        ("host:0", "out of range"),
        ("host:65536", "out of range"),
        ("a:1,,b:2", "is not HOST:PORT"),
        ("a:1,b:2,a:1", "a:1 is given twice"),
    ],
)
def test_bad_addresses_are_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_servers(text)


def test_rpc_with_no_gpu_layers_is_refused_where_the_options_are_built() -> None:
    with pytest.raises(ConfigError, match="--gpu-layers 0") as refused:
        DecodeOptions(rpc="127.0.0.1:50052", n_gpu_layers=0)
    assert refused.value.field == "rpc"
    options = DecodeOptions(rpc="127.0.0.1:50052", n_gpu_layers=12)
    assert options.servers == (Endpoint("127.0.0.1", 50052),)


def test_rpc_on_windows_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The target's child inherits its logits mapping by descriptor, which Windows does not
    hand on: one clear line instead of a failure inside process creation."""
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(ConfigError, match="Windows") as refused:
        DecodeOptions(rpc="127.0.0.1:50052")
    assert refused.value.field == "rpc"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "hi", "--rpc", "127.0.0.1"],
        ["plan", "--rpc", "127.0.0.1:99999"],
        ["bench", "--rpc", "a:1,a:1"],
        ["serve", "--rpc", "127.0.0.1:5", "--gpu-layers", "0"],
        ["run", "hi", "--rpc", "127.0.0.1:5", "-ngl", "0"],
    ],
)
def test_bad_rpc_fails_before_any_model_loads(isolated: dict[str, str], args: list[str]) -> None:
    # The store is empty and the hub unreachable: any attempt to find a model would say so.
    result = edgespec_here(*args, env=isolated)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--rpc" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_protocol_is_the_installed_llama_cpps() -> None:
    candidates = [Path(p) / "include" / "ggml-rpc.h" for p in sysconfig.get_paths().values()]
    candidates += [Path(sys.prefix) / "include" / "ggml-rpc.h"]
    header = next((p for p in candidates if p.is_file()), None)
    if header is None:
        pytest.skip("llama-cpp-python installed no ggml-rpc.h here")
    text = header.read_text()
    found = tuple(
        int(re.search(rf"RPC_PROTO_{part}_VERSION\s+(\d+)", text).group(1))  # type: ignore[union-attr]
        for part in ("MAJOR", "MINOR", "PATCH")
    )
    assert found == PROTOCOL


# --- the handshake, against a fake server ---------------------------------------------------


class FakeServer:
    """Speaks the first commands of llama.cpp's RPC protocol (or misbehaves as told)."""

    def __init__(
        self,
        version: tuple[int, int, int] = PROTOCOL,
        hang_up: bool = False,
        devices: int = 2,
        pause_s: float = 0.0,
        memory: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        self.version, self.hang_up, self.devices = version, hang_up, devices
        self.pause_s = pause_s  # before each reply: a slow server
        self.memory = memory  # (free, total) of each device; None: device i has i + 1 GB of 4
        if memory is not None:
            self.devices = len(memory)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = Endpoint("127.0.0.1", self.sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self._client(conn)

    def _client(self, conn: socket.socket) -> None:
        while True:
            head = conn.recv(9, socket.MSG_WAITALL)
            if len(head) < 9:
                return
            cmd, size = struct.unpack("<BQ", head)
            payload = conn.recv(size, socket.MSG_WAITALL) if size else b""
            if self.hang_up:
                return
            if cmd == 14:
                reply = bytes([*self.version, 0]) + bytes(24)
            elif cmd == 15:
                reply = struct.pack("<I", self.devices)
            elif cmd == 11:
                device = struct.unpack("<I", payload)[0]
                free = (device + 1) * 10**9, 4 * 10**9
                reply = struct.pack("<QQ", *(self.memory[device] if self.memory else free))
            else:
                return
            time.sleep(self.pause_s)
            try:
                conn.sendall(struct.pack("<Q", len(reply)) + reply)
            except OSError:  # the client gave up (a probe that found it busy)
                return

    def close(self) -> None:
        self.sock.close()


def test_probe_reads_version_devices_and_memory() -> None:
    server = FakeServer()
    try:
        info = probe(server.endpoint)
    finally:
        server.close()
    assert info.version == PROTOCOL
    assert info.memory == ((10**9, 4 * 10**9), (2 * 10**9, 4 * 10**9))
    assert info.free == 3 * 10**9 and info.rtt_s > 0
    assert split([info]) == pytest.approx([1 / 3, 2 / 3])


def test_another_protocol_version_names_the_server() -> None:
    server = FakeServer(version=(PROTOCOL[0] + 1, 0, 0))
    try:
        with pytest.raises(RemoteError, match=f"{server.endpoint} speaks protocol") as e:
            probe(server.endpoint)
    finally:
        server.close()
    assert "build_rpc_server.sh" in str(e.value)


def test_a_server_that_hangs_up_at_the_handshake_is_named() -> None:
    server = FakeServer(hang_up=True)
    try:
        with pytest.raises(RemoteError, match=f"{server.endpoint} ended the handshake"):
            probe(server.endpoint)
    finally:
        server.close()


def test_a_server_claiming_countless_devices_is_refused() -> None:
    server = FakeServer(devices=0xFFFFFFFF)
    try:
        with pytest.raises(RemoteError, match="claims 4294967295 devices"):
            probe(server.endpoint)
    finally:
        server.close()


def test_the_handshake_has_one_deadline_not_one_per_reply() -> None:
    # Each reply comes well within the timeout; the seven of the handshake together do not.
    server = FakeServer(pause_s=0.4)
    try:
        with pytest.raises(RemoteError, match="stopped answering: no answer"):
            probe(server.endpoint, timeout=1.0)
    finally:
        server.close()


def test_a_server_of_another_commit_is_refused_for_its_patch_version() -> None:
    """The patch version changes with ggml's operations: a graph would mean other ops there."""
    server = FakeServer(version=(*PROTOCOL[:2], PROTOCOL[2] + 1))
    try:
        with pytest.raises(RemoteError, match=f"{server.endpoint} speaks protocol"):
            probe(server.endpoint)
    finally:
        server.close()


def test_a_busy_server_is_named_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp's server serves one client at a time: the kernel takes the next connection and
    nothing answers it. That is a busy server, not another llama.cpp version."""
    monkeypatch.setattr(rpc_servers, "BUSY_AFTER_S", 0.1)
    server = FakeServer(pause_s=60)  # a hello that is never answered in time
    try:
        with pytest.raises(RemoteError, match=f"{server.endpoint} is busy") as e:
            probe(server.endpoint)
    finally:
        server.close()
    assert "another llama.cpp version" not in str(e.value)


class SilentConnection:
    """A connection nobody answers, on a fake clock: each read spends its whole timeout."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timeout = 0.0
        self.options: list[tuple[int, int, bytes]] = []

    def monotonic(self) -> float:
        return self.now

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout

    def sendall(self, data: bytes) -> None:
        pass

    def recv(self, n: int) -> bytes:
        self.now += self.timeout
        raise TimeoutError

    def setsockopt(self, level: int, option: int, value: bytes) -> None:
        self.options.append((level, option, value))

    def __enter__(self) -> SilentConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_busy_is_named_once_the_hello_waited_its_threshold_not_the_whole_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    silent = SilentConnection()
    monkeypatch.setattr(rpc_servers, "monotonic", silent.monotonic)
    monkeypatch.setattr(rpc_servers.socket, "create_connection", lambda *a, **kw: silent)
    with pytest.raises(RemoteError, match=re.escape("127.0.0.1:7 is busy")):
        probe(Endpoint("127.0.0.1", 7), timeout=rpc_servers.PROBE_TIMEOUT_S)
    assert silent.now == rpc_servers.BUSY_AFTER_S < rpc_servers.PROBE_TIMEOUT_S
    # Reset, not closed: a server that answered the hello of a closed client would die.
    reset = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert silent.options == [reset]


@pytest.mark.parametrize(
    ("text", "memory"),
    [
        ("pi:50052@1.5G", 1_500_000_000),
        ("pi:50052@1536M", 1_536_000_000),
        ("pi:50052@2GiB", 2 << 30),
        ("[::1]:7@512mb", 512_000_000),
    ],
)
def test_a_servers_memory_is_given_after_an_at(text: str, memory: int) -> None:
    (endpoint,) = parse_servers(text)
    assert endpoint.memory == memory
    assert str(endpoint) in ("pi:50052", "[::1]:7")  # what llama.cpp is given: no memory


@pytest.mark.parametrize("text", ["pi:1@", "pi:1@lots", "pi:1@1.5", "pi:1@100K", "pi:1@1G,pi:1@2G"])
def test_a_bad_memory_is_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--rpc"):
        parse_servers(text)


PI_RAM, PI_FREE = 4 * 10**9, 1_500_000_000  # a Pi of 4 GB, 1.5 GB of it free


def test_a_cpu_server_elsewhere_needs_its_free_memory_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama.cpp's CPU device reports its host's whole RAM as free: the Pi's 4 GB is not free,
    and the probe asks for what is."""
    server = FakeServer(memory=((PI_RAM, PI_RAM),))
    monkeypatch.setattr(rpc_servers, "_is_this_machine", lambda address: False)
    try:
        with pytest.raises(RemoteError, match=re.escape(f"--rpc {server.endpoint}@2.0G")):
            probe(server.endpoint)
        given = probe(replace(server.endpoint, memory=PI_FREE))
    finally:
        server.close()
    assert given.free == PI_FREE and given.free_from == "given"


def test_a_cpu_server_on_this_machine_takes_what_is_available_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeServer(memory=((PI_RAM, PI_RAM), (10**9, 2 * 10**9)))
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=PI_FREE))
    try:
        here = probe(server.endpoint)
    finally:
        server.close()
    # The CPU device gets what is available here; a GPU's own count stands.
    assert here.memory == ((PI_FREE, PI_RAM), (10**9, 2 * 10**9))
    assert here.free_from == "this machine"


def test_the_plan_says_where_a_servers_free_memory_came_from(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from edgespec.cli.plan_cmd import _render_rpc

    device = {"free": PI_FREE, "total": PI_RAM, "share": 1.0}
    server = {"server": "pi:50052", "protocol": "7.0.0", "rtt_ms": 1.5, "devices": [device]}
    _render_rpc({"servers": [{**server, "free_from": "given"}], "link": None})
    _render_rpc({"servers": [server], "link": None})  # a plan made before it was said
    shown = capsys.readouterr().out
    assert "round trip 1.50 ms; free memory as given by --rpc): 1.50 GB free of 4.00 GB" in shown
    assert "round trip 1.50 ms): 1.50 GB free" in shown


def test_a_cpu_server_never_gets_more_of_the_target_than_is_free(  # type: ignore[no-untyped-def]
    infos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake Pi, its 1.5 GB given, and a 1.1 GB target: at every context the plan puts on
    it at most what is free, or stops and says so."""
    from edgespec.planner.memory import model_memory
    from edgespec.planner.resources import choose_resources
    from tests.machines import hardware

    t, d = infos
    t = replace(t, file_bytes=t.header_bytes + 1_100_000_000)
    server = FakeServer(memory=((PI_RAM, PI_RAM),))
    monkeypatch.setattr(rpc_servers, "_is_this_machine", lambda address: False)
    try:
        pi = probe(replace(server.endpoint, memory=PI_FREE))
    finally:
        server.close()
    planned = []
    for n_ctx in (1024, 4096, 8192, 32768):
        try:
            res = choose_resources(hardware(8_000_000_000), t, d, n_ctx=n_ctx, servers=[pi])
        except ConfigError as refused:
            assert f"{server.endpoint} 1.50 GB" in str(refused)
            continue
        planned.append(n_ctx)
        assert model_memory(t, res.n_ctx).total <= PI_FREE
    assert planned == [1024, 4096]


def test_a_refused_connection_is_one_line() -> None:
    endpoint = Endpoint("127.0.0.1", closed_port())
    with pytest.raises(RemoteError, match=f"{endpoint} is unreachable: connection refused"):
        probe(endpoint)


def test_the_kv_mirror_follows_a_target_that_lost_its_cache() -> None:
    from tests.fakes import FakeModel

    model = FakeModel()
    cache = CachedModel(model)
    cache.decode([1, 2, 3, 4], 1)
    model.rewind(0)  # what a reloaded target on RPC servers holds
    logits = cache.sync([1, 2, 3, 4, 5])
    assert cache.tokens == [1, 2, 3, 4, 5] and model.n_past == 5
    assert np.array_equal(logits, FakeModel().decode([1, 2, 3, 4, 5], 1)[0])


# --- real servers on loopback -----------------------------------------------------------------


@dataclass
class RpcServer:
    binary: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(self.binary), "-H", "127.0.0.1", "-p", str(self.port), "-t", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                probe(Endpoint("127.0.0.1", self.port), timeout=1, pings=1)
                return
            except RemoteError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def rpc_binary() -> Path:
    """ggml-rpc-server of the installed llama.cpp (built once by the script, then cached)."""
    found = os.environ.get("EDGESPEC_RPC_SERVER")
    if not found:
        run = subprocess.run(
            ["sh", str(ROOT / "scripts" / "build_rpc_server.sh")],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        found = run.stdout.strip().splitlines()[-1]
    return Path(found)


@pytest.fixture
def servers(rpc_binary: Path) -> Iterator[list[RpcServer]]:
    started = [RpcServer(rpc_binary, closed_port()) for _ in range(2)]
    try:
        for server in started:
            server.start()
        yield started
    finally:
        for server in started:
            server.kill()


@pytest.fixture
def proxied(servers: list[RpcServer]) -> Iterator[str]:
    """Both servers behind the delay proxy at 10 ms added round trip."""
    relays = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "delay_proxy.py"),
                s.endpoint,
                "--rtt-ms",
                "10",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for s in servers
    ]
    try:
        ports = [r.stdout.readline().split()[1] for r in relays]  # type: ignore[union-attr]
        yield ",".join(f"127.0.0.1:{p}" for p in ports)
    finally:
        for relay in relays:
            relay.kill()
            relay.wait()


PROMPT = "Write a Python function that checks whether a string is a palindrome."


def _load(
    pair: RealPair, rpc: str | None, drafter: str = "none", gpu_layers: int | None = None
) -> Speculator:
    return Speculator.load(
        target=str(pair.target),
        draft=str(pair.draft),
        drafter=drafter,
        keep_draft=True,
        n_ctx=1024,
        rpc=rpc,
        n_gpu_layers=gpu_layers,
    )


@pytest.fixture(scope="module")
def local_texts(real_pair: RealPair) -> dict[str, str]:
    """Greedy text on this machine alone, the reference for every drafter."""
    with _load(real_pair, None) as spec:
        return {d: spec.generate(PROMPT, drafter=d, max_tokens=48) for d in ("none", "ngram")}


@pytest.mark.real
def test_greedy_text_through_two_servers_is_the_local_text_for_every_drafter(
    real_pair: RealPair,
    servers: list[RpcServer],
    local_texts: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rpc = ",".join(s.endpoint for s in servers)
    # auto calibrates through these servers: on ports of this test only, so not in the user's
    # calibration cache.
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    with _load(real_pair, rpc, drafter="auto") as spec:
        assert spec.plan is not None
        assert [str(s.endpoint) for s in spec.plan.resources.servers] == rpc.split(",")
        for drafter in ("none", "ngram", "model", "hybrid", "auto"):
            text = spec.generate(PROMPT, drafter=drafter, max_tokens=48)
            assert text == local_texts["none"], drafter
    assert local_texts["ngram"] == local_texts["none"]


@pytest.mark.real
def test_some_layers_on_the_servers_the_rest_here(
    real_pair: RealPair,
    servers: list[RpcServer],
    local_texts: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rpc = ",".join(s.endpoint for s in servers)
    monkeypatch.setenv("EDGESPEC_DEBUG", "1")  # the child logs llama.cpp's placement
    with _load(real_pair, rpc, gpu_layers=14) as spec:
        assert spec.plan is not None and spec.plan.resources.n_gpu_layers == 14
        spec.target._log.seek(0)
        assert re.search(r"offloaded 14/\d+ layers", spec.target._log.read().decode())
        assert spec.generate(PROMPT, drafter="ngram", max_tokens=48) == local_texts["none"]


@pytest.mark.real
def test_a_server_killed_mid_generation_is_named_and_the_session_goes_on(
    real_pair: RealPair, servers: list[RpcServer], local_texts: dict[str, str]
) -> None:
    rpc = ",".join(s.endpoint for s in servers)
    with _load(real_pair, rpc) as spec:
        stream = spec.stream(PROMPT, drafter="none", max_tokens=200)
        with pytest.raises(RemoteError) as e:
            for i, _ in enumerate(stream):
                if i == 5:
                    servers[1].kill()
        message = str(e.value)
        assert servers[1].endpoint in message and "unreachable" in message
        assert servers[0].endpoint not in message
        assert spec.session.cached_tokens == []  # nothing cached that the target lost
        # While it is down, asking again says the same; once it is back, the session goes on.
        with pytest.raises(RemoteError, match=re.escape(servers[1].endpoint)):
            spec.generate(PROMPT, drafter="none", max_tokens=8)
        servers[1].start()
        assert spec.generate(PROMPT, drafter="ngram", max_tokens=48) == local_texts["none"]


@pytest.mark.real
def test_a_wrong_address_fails_fast_naming_it(
    isolated: dict[str, str], real_pair: RealPair
) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    result = edgespec(
        "plan", "--target", str(real_pair.target), "--draft", str(real_pair.draft),
        "--rpc", dead, env=isolated, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"edgespec: error: RPC server {dead} is unreachable: connection refused "
        "(is ggml-rpc-server running there?)"
    )


@pytest.mark.real
def test_plan_through_a_slow_link_measures_it(
    isolated: dict[str, str],
    real_pair: RealPair,
    proxied: str,
    local_texts: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = edgespec(
        "plan", "--target", str(real_pair.target), "--draft", str(real_pair.draft),
        "--rpc", proxied, "--json", env=isolated, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    servers = doc["rpc"]["servers"]
    assert [s["server"] for s in servers] == proxied.split(",")
    # The proxy holds every message 5 ms each way: no round trip can be shorter.
    assert all(s["rtt_ms"] >= 10 for s in servers)
    assert sum(d["share"] for s in servers for d in s["devices"]) == pytest.approx(1, abs=1e-3)
    link = doc["rpc"]["link"]
    assert link["target_step_ms"] == doc["calibration"]["target_step_ms"]
    assert "a target step through the RPC servers costs" in link["note"]
    # And the text through that link is still the local text (auto planned from the
    # calibration the command above measured and cached in the isolated home).
    monkeypatch.setenv("EDGESPEC_HOME", isolated["EDGESPEC_HOME"])
    with _load(real_pair, proxied, drafter="auto") as spec:
        assert spec.plan is not None and spec.plan.calibration_cached
        assert spec.generate(PROMPT, drafter="auto", max_tokens=48) == local_texts["none"]


@pytest.mark.real
def test_a_real_server_serving_another_client_is_named_busy(servers: list[RpcServer]) -> None:
    """llama.cpp's server serves one client at a time: while a client holds it (here a bare
    socket after its hello, as a running `edgespec serve --rpc` would), a second probe hears
    nothing and must say busy, not "another llama.cpp version"."""
    server = servers[0]
    holder = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        holder.sendall(struct.pack("<BQ", 14, 24) + bytes(24))
        assert len(holder.recv(8 + 28, socket.MSG_WAITALL)) == 36  # its hello answered
        with pytest.raises(RemoteError, match=f"{server.endpoint} is busy"):
            probe(Endpoint("127.0.0.1", server.port))
    finally:
        holder.close()
    # Once the other client is gone, the server answers again.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert probe(Endpoint("127.0.0.1", server.port)).version == PROTOCOL
            break
        except RemoteError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
