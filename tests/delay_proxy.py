"""A TCP relay that adds a fixed latency each way: a LAN or Wi-Fi link between edgespec and a
llama.cpp RPC server, simulated on one machine (for tests/test_rpc.py).

    python tests/delay_proxy.py TARGET_HOST:PORT --rtt-ms 10 [--port 0]

Every chunk read on one side is written on the other `rtt/2` later (order kept, pipelined, so
only latency is added, not a bandwidth cap). Prints `listening PORT` on stdout once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while True:
            data = await reader.read(1 << 16)
            await queue.put((loop.time() + delay, data))
            if not data:
                return

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(read(), write())
    except (ConnectionError, OSError):
        writer.close()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _serve(target: tuple[str, int], port: int, delay: float) -> None:
    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(*target)
        except OSError:
            c_writer.close()
            return
        _no_delay(c_writer)
        _no_delay(s_writer)
        await asyncio.gather(_relay(c_reader, s_writer, delay), _relay(s_reader, c_writer, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="HOST:PORT to relay to")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="added round-trip latency")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    try:
        asyncio.run(_serve((host, int(port)), args.port, args.rtt_ms / 2000))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
