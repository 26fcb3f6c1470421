"""OpenAI's streamed answers: a generation as server-sent chunks, ending with `[DONE]`."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from edgespec.api import DoneEvent, GenerationStats, TokenEvent
from edgespec.errors import EdgespecError
from edgespec.server.generation import Generation
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ApiError, busy
from edgespec.server.responses import edgespec_block, finish, now, usage
from edgespec.server.running import answer
from edgespec.server.streaming import Outbox, ReaderTooSlow, cut_error
from edgespec.server.toolcalls import CallPart
from edgespec.server.worker import QueueFull, Worker
from edgespec.text.grammar import GrammarError


async def stream(
    worker: Worker,
    gen: Generation,
    model: str,
    metrics: Metrics,
    finished: Callable[[GenerationStats], None],
    out: Outbox,
) -> None:
    """The answer as chunks into `out`, then `data: [DONE]` and None; an error is sent as
    OpenAI's error body; `finished` is told the stats of an answer that ended well."""
    base = {
        "id": gen.id,
        "object": "chat.completion.chunk" if gen.chat else "text_completion",
        "created": now(),
        "model": model,
    }

    reader = gen.reader()
    chunk = partial(_chunk, gen, base)

    async def send(parts: list[str | CallPart], logprobs: dict[str, Any] | None = None) -> None:
        for part in parts:
            await out.put(_event(chunk(part, logprobs=logprobs)))

    try:
        async with worker.turn(gen.client) as lane:
            if gen.chat:
                await out.put(_event({**base, "choices": [_first_choice()]}))
            async for event in answer(worker, lane, gen):
                if isinstance(event, TokenEvent):
                    logprobs = gen.logprobs_of(event)  # a token held back comes later
                    if event.text:
                        await send(reader.feed(event.text) if reader else [event.text], logprobs)
                elif isinstance(event, DoneEvent):
                    await send(reader.end() if reader else [])
                    # The last content chunk says how it went; a usage-only one follows if asked.
                    last = chunk(None, finish(event, reader))
                    last["usage"] = usage(event.stats)
                    last["edgespec"] = edgespec_block(event.stats, gen.reports_cache)
                    await out.put(_event(last))
                    if gen.req.stream_options and gen.req.stream_options.include_usage:
                        await out.put(_event({**base, "choices": [], "usage": usage(event.stats)}))
                    finished(event.stats)
    except QueueFull:
        await out.put(_event(busy().body()))
    except ReaderTooSlow:  # the slot is free already: the rest goes out as it may
        await out.put(_event(cut_error().body()))
    except GrammarError as exc:
        await out.put(_event(ApiError(400, str(exc), param=gen.structure.param).body()))
    except EdgespecError as exc:
        metrics.errors.labels("server_error").inc()
        await out.put(_event(ApiError(500, str(exc), kind="server_error").body()))
    await out.put("data: [DONE]\n\n")
    await out.put(None)


def _chunk(
    gen: Generation,
    base: dict[str, Any],
    part: str | CallPart | None,
    reason: str | None = None,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if gen.chat:
        choice: dict[str, Any] = {"index": 0, "delta": _delta(part)}
    else:
        choice = {"index": 0, "text": part or ""}
    choice["logprobs"] = logprobs
    choice["finish_reason"] = reason
    return {**base, "choices": [choice]}


def _first_choice() -> dict[str, Any]:
    return {"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}


def _delta(part: str | CallPart | None) -> dict[str, Any]:
    """A chunk's delta: text, or part of a tool call as OpenAI streams it (its id and name
    first, then its arguments in fragments)."""
    if isinstance(part, str):
        return {"content": part} if part else {}
    if part is None:
        return {}
    call: dict[str, Any] = {"index": part.index, "function": {"arguments": part.arguments}}
    if part.id is not None:
        call.update(id=part.id, type="function")
        call["function"]["name"] = part.name
    return {"tool_calls": [call]}


def _event(doc: dict[str, Any]) -> str:
    return f"data: {json.dumps(doc)}\n\n"
