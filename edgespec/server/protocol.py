"""uvicorn's HTTP/1.1 protocol with a deadline for each request's head (its request line and
headers): uvicorn has none, so a client that sent its headers a byte at a time held a
connection for as long as it liked."""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 10.0  # a guess


class HeadTimeout(H11Protocol):
    _head: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._await_head()  # the next request on this connection

    def handle_events(self) -> None:
        super().handle_events()
        if self._head is not None and self.conn.their_state is not h11.IDLE:
            self._head.cancel()  # the head is here: the body has its own deadline (body.py)
            self._head = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head is not None:
            self._head.cancel()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self._head is not None:
            self._head.cancel()
        self._head = self.loop.call_later(HEAD_TIMEOUT_S, self._too_slow)

    def _too_slow(self) -> None:
        self._head = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
