"""A request's JSON body, read within its size and time limits and checked against its shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import Request
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from edgespec.server.openai import ApiError
from edgespec.server.openai import Request as OpenAIRequest

MAX_BODY = 1_000_000  # bytes (a guess)
BODY_TIMEOUT_S = 30.0  # for the whole body, so that a slow one frees its connection (a guess)


async def parse(request: Request, model: type[OpenAIRequest]) -> Any:
    """The body as a `model`, or the ApiError that answers it."""
    # A web page may send a text/plain POST to any address without asking first (no CORS
    # preflight): only JSON declared as JSON is read.
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(
            415, "the request body must be JSON sent as 'Content-Type: application/json'"
        )
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        raise ApiError(413, f"the request body is larger than {MAX_BODY} bytes")
    try:
        body = await asyncio.wait_for(_body(request), BODY_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise ApiError(
            408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s"
        ) from None
    except ClientDisconnect:  # nobody to answer: logged as 499, like a client that left later
        raise ApiError(499, "the client left while sending its request") from None
    try:
        doc = json.loads(body)
        # A lone surrogate (\ud800) decodes into a str that nothing can encode later.
        json.dumps(doc, ensure_ascii=False).encode()
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    except UnicodeEncodeError:
        raise ApiError(
            400, "the request body has an unpaired surrogate (\\ud800-\\udfff)"
        ) from None
    except ValueError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(
            400, f"{where}: {first['msg']}" if where else first["msg"], param=where
        ) from exc


async def _body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise ApiError(413, f"the request body is larger than {MAX_BODY} bytes")
    return body
