"""llama.cpp's /infill answers, whole and streamed, as llama-server writes them (llama.vim
reads `content`, `timings/...` by `response_fields`, `truncated` and `tokens_cached`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from edgespec.api import DoneEvent, GenerationStats, TokenEvent
from edgespec.server.generation import Generation
from edgespec.server.infill import InfillRequest
from edgespec.server.metrics import Metrics
from edgespec.server.responses import edgespec_block
from edgespec.server.running import streamed
from edgespec.server.streaming import Outbox
from edgespec.server.worker import Worker


def answer(gen: Generation, model: str, text: str, done: DoneEvent) -> dict[str, Any]:
    """llama.cpp's /infill answer (`to_json_non_oaicompat`), with edgespec's block."""
    req = _request(gen)
    stats = done.stats
    doc = {
        "index": 0,
        "content": "" if req.warm_only else text,
        "id_slot": 0,
        "stop": True,
        "model": model,
        "tokens_predicted": 0 if req.warm_only else stats.generated,
        "tokens_evaluated": stats.prompt_tokens,
        "has_new_line": "\n" in text,
        "truncated": gen.fill.truncated,
        "stop_type": "eos" if done.finish_reason == "stop" else "limit",
        "stopping_word": "",
        "tokens_cached": stats.prompt_tokens + stats.generated,
        "timings": timings(stats, gen.reports_cache),
        "edgespec": edgespec_block(stats, gen.reports_cache),
    }
    if not gen.reports_cache:
        del doc["tokens_cached"]
    return pick(doc, req.response_fields) if req.response_fields else doc


def timings(stats: GenerationStats, reports_cache: bool) -> dict[str, Any]:
    """llama.cpp's `timings`, with its draft counters; the prompt's (which tell how much of it
    was cached) only where `reports_cache`."""
    prompt_n = stats.prompt_tokens - stats.prompt_cached
    prompt_ms, predicted_ms = stats.prompt_s * 1000, stats.decode_s * 1000
    prompt = {
        "cache_n": stats.prompt_cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms else 0.0,
    }
    return {
        **(prompt if reports_cache else {}),
        "predicted_n": stats.generated,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / stats.generated if stats.generated else 0.0,
        "predicted_per_second": 1000 * stats.generated / predicted_ms if predicted_ms else 0.0,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
    }


def pick(doc: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """llama.cpp's `response_fields`: these fields only, nested ones ("timings/prompt_n") flat."""
    out: dict[str, Any] = {}
    for path in paths:
        value: Any = doc
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def _request(gen: Generation) -> InfillRequest:
    assert isinstance(gen.req, InfillRequest)  # these shapes answer /infill only
    return gen.req


def _line(doc: dict[str, Any]) -> str:
    # Compact, as llama.cpp writes it (llama.vim looks for `"content":"`).
    return f"data: {json.dumps(doc, separators=(',', ':'))}\n\n"


async def stream(
    worker: Worker,
    gen: Generation,
    model: str,
    metrics: Metrics,
    finished: Callable[[GenerationStats], None],
    out: Outbox,
) -> None:
    """llama.cpp's streamed /infill: a `data: {...}` line per piece of text with `stop`
    false, then one with `stop` true and the whole answer's counters (no `[DONE]`)."""
    parts: list[str] = []
    warm_only = _request(gen).warm_only

    async def send_answer(events: AsyncIterator[TokenEvent | DoneEvent]) -> None:
        async for event in events:
            if isinstance(event, TokenEvent) and event.text and not warm_only:
                parts.append(event.text)
                piece = {"index": 0, "content": event.text, "tokens": [event.token]}
                await out.put(_line({**piece, "stop": False, "tokens_predicted": len(parts)}))
            elif isinstance(event, DoneEvent):
                last = answer(gen, model, "".join(parts), event)
                await out.put(_line({**last, "content": ""}))  # the text came in pieces
                finished(event.stats)

    await streamed(worker, gen, metrics, out, _line, send_answer)
    await out.put(None)
