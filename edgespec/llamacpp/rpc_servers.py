"""llama.cpp RPC servers (`--rpc HOST:PORT[@MEM],...`): the addresses parsed, and each server
asked, with its own handshake, whether it answers, its protocol and its memory, before llama.cpp's
client connects (it aborts the process where a server is unreachable or of another version)."""

from __future__ import annotations

import ipaddress
import re
import socket
import statistics
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from time import monotonic, perf_counter

import psutil

from edgespec.errors import ConfigError, EdgespecError

# The protocol of the llama.cpp that llama-cpp-python (as pinned) vendors: ggml-rpc.h's
# RPC_PROTO_*_VERSION (tests/test_rpc.py checks it against the installed header).
PROTOCOL = (7, 0, 0)
_HELLO, _GET_DEVICE_MEMORY, _DEVICE_COUNT = 14, 11, 15
_CAPS = 24  # RPC_CONN_CAPS_SIZE: transport capabilities; all zero = plain TCP
PROBE_TIMEOUT_S = 5.0  # for the whole handshake, not each reply
# An idle server answers its hello within a round trip. llama.cpp's server serves one client at a
# time and the kernel queues the next connection unanswered: no answer by then, it is busy (a
# guess, far above any local network's round trip).
BUSY_AFTER_S = 3.0
# Far more than one server has: a claim of 0xFFFFFFFF would cost a round trip each.
MAX_DEVICES = 64


class RemoteError(EdgespecError):
    """An RPC server cannot be used: unreachable, another version, or gone mid-generation."""


@dataclass(frozen=True, order=True)
class Endpoint:
    host: str
    port: int
    # `@MEM`: the bytes its host has free, where the server cannot say (its CPU device)
    memory: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_servers(text: str) -> tuple[Endpoint, ...]:
    """`HOST:PORT[@MEM][,HOST:PORT[@MEM]...]` (IPv6 as `[ADDR]:PORT`, MEM as `1.5G` or `1536M`)
    into endpoints; ConfigError names the first entry that is malformed, out of range or
    repeated."""
    found: list[Endpoint] = []
    for raw in text.split(","):
        item = raw.strip()
        address, at, memory = item.rpartition("@") if "@" in item else (item, "", "")
        endpoint = replace(_parse_one(address), memory=_memory(memory, item) if at else None)
        if endpoint in found:
            raise ConfigError(f"--rpc: {item} is given twice")
        found.append(endpoint)
    return tuple(found)


def _parse_one(item: str) -> Endpoint:
    if item.startswith("["):
        host, sep, port = item[1:].partition("]:")
        if not sep or not _is_ipv6(host):
            raise ConfigError(f"--rpc: {item!r} is not [IPV6]:PORT")
    else:
        host, sep, port = item.rpartition(":")
        if not sep or not host or ":" in host or any(c.isspace() for c in host):
            raise ConfigError(f"--rpc: {item!r} is not HOST:PORT (e.g. 192.168.1.20:50052)")
    if not port.isdigit():
        raise ConfigError(f"--rpc: the port in {item!r} is not a number")
    number = int(port)
    if not 1 <= number <= 65535:
        raise ConfigError(f"--rpc: port {number} in {item!r} is out of range (1-65535)")
    return Endpoint(host, number)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT])(i?)B?", re.IGNORECASE)


def _memory(text: str, item: str) -> int:
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise ConfigError(f"--rpc: the memory in {item!r} is not a size such as 1.5G or 1536M")
    number, unit, binary = found.groups()
    # Decimal units, as the plan prints GB; with an i, binary.
    scale = (1024 if binary else 1000) ** ("KMGT".index(unit.upper()) + 1)
    if float(number) * scale < 1 << 20:
        raise ConfigError(f"--rpc: {item!r} gives the server less than 1 MiB")
    return int(float(number) * scale)


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ServerInfo:
    endpoint: Endpoint
    version: tuple[int, int, int]
    memory: tuple[tuple[int, int], ...]  # (free, total) bytes of each of its devices
    rtt_s: float  # median round trip of a small command
    free_from: str = "reported"  # or "given" (`@MEM`), "this machine" (a server here)

    @property
    def free(self) -> int:
        return sum(free for free, _ in self.memory)


def _recv(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        _until(sock, deadline)
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        data += chunk
    return data


def _until(sock: socket.socket, deadline: float) -> None:
    """The socket's next operation may take what is left until `deadline`."""
    left = deadline - monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


def _command(
    sock: socket.socket, cmd: int, payload: bytes, reply_size: int, deadline: float
) -> bytes:
    _until(sock, deadline)
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv(sock, 8, deadline))
    if size != reply_size:
        raise ConnectionResetError(f"unexpected reply of {size} bytes to command {cmd}")
    return _recv(sock, reply_size, deadline)


def probe(endpoint: Endpoint, timeout: float = PROBE_TIMEOUT_S, pings: int = 5) -> ServerInfo:
    """Handshake with one server; RemoteError (naming it) when it cannot serve this client or
    the whole handshake takes longer than `timeout`."""
    deadline = monotonic() + timeout
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except OSError as e:
        raise RemoteError(f"RPC server {endpoint} is unreachable: {_why(e)}") from None
    with sock:
        try:
            reply = _command(
                sock, _HELLO, bytes(_CAPS), 4 + _CAPS, min(deadline, monotonic() + BUSY_AFTER_S)
            )
        except TimeoutError:
            # Reset, not closed: the server takes the queued connection once it is free and
            # would answer a hello whose client is gone, which kills it (SIGPIPE).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raise RemoteError(
                f"RPC server {endpoint} is busy: it takes the connection but does not answer, as "
                "llama.cpp's RPC server does while it serves another client (it serves one at a "
                "time); wait for that one to finish, or start another server"
            ) from None
        except OSError as e:
            raise RemoteError(
                f"RPC server {endpoint} ended the handshake ({_why(e)}): it is probably another "
                f"llama.cpp version (this client speaks RPC protocol {_v(PROTOCOL)}); build it "
                "with scripts/build_rpc_server.sh"
            ) from None
        version = (reply[0], reply[1], reply[2])
        # The patch version changes with ggml's list of operations (ggml-rpc.h): another one
        # would compute other operations than the graphs this client sends name.
        if version != PROTOCOL:
            raise RemoteError(
                f"RPC server {endpoint} speaks protocol {_v(version)} but this client "
                f"{_v(PROTOCOL)}: build the server from the same llama.cpp with "
                "scripts/build_rpc_server.sh"
            )
        try:
            info = _devices(sock, endpoint, version, pings, deadline)
            here = _is_this_machine(sock.getpeername()[0])
        except OSError as e:
            raise RemoteError(f"RPC server {endpoint} stopped answering: {_why(e)}") from None
    return _known_free(info, here)


def _known_free(info: ServerInfo, here: bool) -> ServerInfo:
    """The server's devices with the memory they can take: llama.cpp's CPU device reports its
    host's whole RAM as free on every host but Windows, so a device whose free memory is its
    total takes what `@MEM` gives, or a server on this machine what is available here."""
    given = info.endpoint.memory
    if given is not None:
        scale = min(1.0, given / max(info.free, 1))
        memory = tuple((int(free * scale), total) for free, total in info.memory)
        return replace(info, memory=memory, free_from="given")
    if all(free != total for free, total in info.memory):
        return info
    if here:
        available = int(psutil.virtual_memory().available)
        memory = tuple(
            (min(free, available) if free == total else free, total) for free, total in info.memory
        )
        return replace(info, memory=memory, free_from="this machine")
    total = max(total for free, total in info.memory if free == total)
    raise RemoteError(
        f"RPC server {info.endpoint} reports all {total / 1e9:.1f} GB of a device as free, as "
        "llama.cpp's CPU device does on every host but Windows: give what is free there (the "
        f"'available' column of `free -g` on it), e.g. --rpc {info.endpoint}@{total / 2e9:.1f}G"
    )


def _is_this_machine(address: str) -> bool:
    """Whether a peer's address is one of this machine's own (loopback included)."""
    try:
        peer = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if peer.is_loopback:
        return True
    own = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return str(peer) in own


def _devices(
    sock: socket.socket,
    endpoint: Endpoint,
    version: tuple[int, int, int],
    pings: int,
    deadline: float,
) -> ServerInfo:
    times = []
    for _ in range(max(1, pings)):
        t = perf_counter()
        (count,) = struct.unpack("<I", _command(sock, _DEVICE_COUNT, b"", 4, deadline))
        times.append(perf_counter() - t)
    if count > MAX_DEVICES:
        raise RemoteError(
            f"RPC server {endpoint} claims {count} devices (at most {MAX_DEVICES} are expected)"
        )
    memory = []
    for device in range(count):
        reply = _command(sock, _GET_DEVICE_MEMORY, struct.pack("<I", device), 16, deadline)
        free, total = struct.unpack("<QQ", reply)
        memory.append((int(free), int(total)))
    if not memory:
        raise RemoteError(f"RPC server {endpoint} offers no device")
    return ServerInfo(endpoint, version, tuple(memory), statistics.median(times))


def probe_all(endpoints: Sequence[Endpoint]) -> list[ServerInfo]:
    return [probe(e) for e in endpoints]


def split(servers: Sequence[ServerInfo]) -> list[float]:
    """Each server device's share of the target's layers, by free memory (`--tensor-split`)."""
    frees = [free for s in servers for free, _ in s.memory]
    total = sum(frees)
    if total <= 0:
        return [1.0 / len(frees)] * len(frees)
    return [f / total for f in frees]


def _v(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def _why(error: OSError) -> str:
    if isinstance(error, socket.timeout | TimeoutError):
        return "no answer (timed out)"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused (is ggml-rpc-server running there?)"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror})"
    return error.strerror or str(error)
