"""Who a caller is: the API keys it must show one of, and the client its requests count as."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Hashable, Sequence
from pathlib import Path

from fastapi import Request

from edgespec.errors import ConfigError
from edgespec.server.openai import Request as OpenAIRequest


def key_refused(request: Request, keys: Sequence[str]) -> bool:
    """Whether the request lacks every key the server accepts (never, without any)."""
    if not keys:
        return False
    given = request.headers.get("authorization", "").encode()
    # Every key compared, each in constant time: how long it takes tells nothing of which.
    matches = [hmac.compare_digest(given, f"Bearer {key}".encode()) for key in keys]
    return not any(matches)


def client_of(request: Request, req: OpenAIRequest, shared_memory: bool) -> Hashable:
    """Whose caches and drafting memory a request uses: its Authorization header's (a digest,
    not the key itself) and its `user`'s, or None with --shared-memory. Only a key the server
    checks makes this an identity a caller cannot borrow: `user` is whatever a caller sends."""
    if shared_memory:
        return None
    key = hashlib.sha256(request.headers.get("authorization", "").encode()).hexdigest()
    return (key, req.user or "")


def read_keys(path: Path) -> list[str]:
    """`--api-key-file`: one key a line, each its own client (blank lines and `#` comments
    skipped); a ConfigError where it cannot be read or holds none."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--api-key-file {path} cannot be read: {exc}") from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [key for key in keys if key and not key.startswith("#")]
    if not keys:
        raise ConfigError(f"--api-key-file {path} holds no key")
    if len(set(keys)) < len(keys):
        raise ConfigError(f"--api-key-file {path} holds a key twice: each is one client's")
    return keys
