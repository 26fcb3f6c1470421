"""OpenAI's answers to a generation, with edgespec's own block: whole, or streamed as server-sent
chunks ending with `[DONE]`."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from edgespec.api import DoneEvent, GenerationStats, TokenEvent
from edgespec.server.generation import Generation
from edgespec.server.metrics import Metrics
from edgespec.server.running import streamed
from edgespec.server.streaming import Outbox
from edgespec.server.toolcalls import CallPart, ToolCallReader
from edgespec.server.worker import Worker

# What a finished generation reports, in OpenAI's words ("context": the context filled up).
FINISH = {"stop": "stop", "length": "length", "context": "length", None: "stop"}


def now() -> int:
    return int(time.time())


def usage(stats: GenerationStats) -> dict[str, Any]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated,
        "total_tokens": stats.prompt_tokens + stats.generated,
        # Predicted outputs: the prediction's tokens drafted and accepted, drafted and rejected.
        "completion_tokens_details": {
            "accepted_prediction_tokens": stats.accepted_prediction_tokens,
            "rejected_prediction_tokens": stats.rejected_prediction_tokens,
        },
    }


def edgespec_block(stats: GenerationStats, reports_cache: bool) -> dict[str, Any]:
    """How the answer was made: drafters used, what they drafted and what was accepted, and
    unless `reports_cache` is False the time to the first token (it tells a cached prompt)."""
    block = {
        "drafters": {
            name: {"rounds": c.rounds, "drafted": c.drafted, "accepted": c.accepted}
            for name, c in stats.by_drafter.items()
        },
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "acceptance": round(stats.acceptance_rate, 4),
        "tokens_per_target_pass": round(stats.mean_accepted_length, 4),
        "tokens_per_s": round(stats.tokens_per_s, 3),
        "ttft_s": round(stats.ttft_s, 4),
    }
    if not reports_cache:
        del block["ttft_s"]
    return block


def finish(done: DoneEvent, reader: ToolCallReader | None) -> str:
    reason = FINISH.get(done.finish_reason, "stop")
    return "tool_calls" if reader is not None and reader.calls and reason == "stop" else reason


def message(text: str, reader: ToolCallReader | None) -> dict[str, Any]:
    """The assistant's message: its text, and the tool calls read out of it."""
    if reader is None:
        return {"role": "assistant", "content": text}
    parts = [*reader.feed(text), *reader.end()]
    content = "".join(p for p in parts if isinstance(p, str))
    if not reader.calls:
        return {"role": "assistant", "content": content}
    calls = [c.model_dump() for c in reader.calls]
    return {"role": "assistant", "content": content or None, "tool_calls": calls}


def full_response(gen: Generation, model: str, text: str, done: DoneEvent) -> dict[str, Any]:
    reader = gen.reader()
    logprobs = None if gen.logprobs is None else gen.logprobs.block(gen.logprobs.returned)
    key, said = ("message", message(text, reader)) if gen.chat else ("text", text)
    return {
        **_head(gen, model, "chat.completion"),
        "choices": [_choice(key, said, logprobs, finish(done, reader))],
        "usage": usage(done.stats),
        "edgespec": edgespec_block(done.stats, gen.reports_cache),
    }


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
    head = _head(gen, model, "chat.completion.chunk")
    reader = gen.reader()

    async def send_parts(
        parts: list[str | CallPart], logprobs: dict[str, Any] | None = None
    ) -> None:
        for part in parts:
            await out.put(_event({**head, "choices": [_part(gen, part, logprobs)]}))

    async def send_answer(events: AsyncIterator[TokenEvent | DoneEvent]) -> None:
        if gen.chat:
            first = _choice("delta", {"role": "assistant"}, None, None)
            await out.put(_event({**head, "choices": [first]}))
        async for event in events:
            if isinstance(event, TokenEvent):
                logprobs = gen.logprobs_of(event)  # a token held back comes later
                if event.text:
                    await send_parts(reader.feed(event.text) if reader else [event.text], logprobs)
            elif isinstance(event, DoneEvent):
                await send_parts(reader.end() if reader else [])
                # The last content chunk says how it went; a usage-only one follows if asked.
                last = {**head, "choices": [_part(gen, None, None, finish(event, reader))]}
                last["usage"] = usage(event.stats)
                last["edgespec"] = edgespec_block(event.stats, gen.reports_cache)
                await out.put(_event(last))
                if gen.req.stream_options and gen.req.stream_options.include_usage:
                    await out.put(_event({**head, "choices": [], "usage": usage(event.stats)}))
                finished(event.stats)

    await streamed(worker, gen, metrics, out, _event, send_answer)
    await out.put("data: [DONE]\n\n")
    await out.put(None)


def _head(gen: Generation, model: str, chat_object: str) -> dict[str, Any]:
    """The fields every answer and chunk starts with (a text completion's object is the same
    whole or streamed)."""
    kind = chat_object if gen.chat else "text_completion"
    return {"id": gen.id, "object": kind, "created": now(), "model": model}


def _choice(
    key: str, said: Any, logprobs: dict[str, Any] | None, reason: str | None
) -> dict[str, Any]:
    """A choice: what it says under `key` (message, delta or text), then how it ended."""
    return {"index": 0, key: said, "logprobs": logprobs, "finish_reason": reason}


def _part(
    gen: Generation,
    part: str | CallPart | None,
    logprobs: dict[str, Any] | None,
    reason: str | None = None,
) -> dict[str, Any]:
    """A chunk's choice: part of the text or of a tool call."""
    key, said = ("delta", _delta(part)) if gen.chat else ("text", part or "")
    return _choice(key, said, logprobs, reason)


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
