"""Who a caller is: the API key it must show, and the client its requests count as."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Hashable

from fastapi import Request

from edgespec.server.openai import Request as OpenAIRequest


def key_refused(request: Request, api_key: str | None) -> bool:
    """Whether the request lacks the key the server requires (never, without one)."""
    if api_key is None:
        return False
    given = request.headers.get("authorization", "")
    return not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())


def client_of(request: Request, req: OpenAIRequest, shared_memory: bool) -> Hashable:
    """Whose drafting memory a request uses: its API key's and `user`'s (a digest, not the
    key itself), or None with --shared-memory."""
    if shared_memory:
        return None
    key = hashlib.sha256(request.headers.get("authorization", "").encode()).hexdigest()
    return (key, req.user or "")
