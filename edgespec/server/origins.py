"""Which requests may come from where: a web page elsewhere must not drive a server on this
machine, neither through its own origin nor by a DNS name rebound to 127.0.0.1."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Request

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class Callers:
    def __init__(self, host: str, cors: Sequence[str]) -> None:
        name = _bare(host)
        # A wildcard address serves every name this machine has: no Host to hold it to.
        self.any_host = name in ("", "0.0.0.0", "::")
        self.hosts = _LOOPBACK_NAMES | {name}
        self.origins = frozenset(o.rstrip("/").lower() for o in cors)

    def refusal(self, request: Request) -> str | None:
        """Why the request may not come from where it does (None: it may)."""
        host = request.headers.get("host", "")
        if not self.any_host and _bare(host) not in self.hosts:
            return f"the Host {host!r} is not served here; use http://127.0.0.1 or --host"
        # This server serves no pages: an Origin is another site's page, allowed by --cors.
        origin = request.headers.get("origin")
        if origin is None or origin.rstrip("/").lower() in self.origins or "*" in self.origins:
            return None
        return f"web pages from {origin!r} may not call this server; see --cors"


def _bare(host: str) -> str:
    """The name in a Host header or --host value, without port or brackets."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1:].partition("]")[0]
    if name.count(":") == 1:
        name = name.partition(":")[0]
    return name.rstrip(".")
