"""OpenAI's whole answer to a finished generation, with edgespec's own block."""

from __future__ import annotations

import time
from typing import Any

from edgespec.api import DoneEvent, GenerationStats
from edgespec.server.generation import Generation
from edgespec.server.toolcalls import ToolCallReader

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
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reader.calls
    ]
    return {"role": "assistant", "content": content or None, "tool_calls": calls}


def full_response(gen: Generation, model: str, text: str, done: DoneEvent) -> dict[str, Any]:
    reader = gen.reader()
    logprobs = None if gen.logprobs is None else gen.logprobs.block(gen.logprobs.returned)
    if gen.chat:
        choice: dict[str, Any] = {"index": 0, "message": message(text, reader)}
    else:
        choice = {"index": 0, "text": text}
    choice["logprobs"] = logprobs
    choice["finish_reason"] = finish(done, reader)
    return {
        "id": gen.id,
        "object": "chat.completion" if gen.chat else "text_completion",
        "created": now(),
        "model": model,
        "choices": [choice],
        "usage": usage(done.stats),
        "edgespec": edgespec_block(done.stats, gen.reports_cache),
    }
