"""Fill-in-the-middle over HTTP: OpenAI's legacy `suffix` on /v1/completions, and llama.cpp's
/infill, in its request and response shapes, so that editor plugins written for llama-server
(llama.vim, llama.vscode) work unchanged.

What llama.vim sends and reads was read in ggml-org/llama.vim, autoload/llama.vim at commit
a1c8e6e40cb45df59b78add5b65d575386832465: `input_prefix`, `input_suffix`, `input_extra`
[{filename, text}], `prompt` (the current line's text after the cursor's prefix), `n_predict`,
`stop`, `n_indent`, `top_k`, `top_p`, `samplers`, `stream`, `cache_prompt`, `t_max_prompt_ms`,
`t_max_predict_ms`, `response_fields`; it reads `content`, the `timings/...` fields flattened
by `response_fields`, `truncated` and `tokens_cached`, and first checks the body with the
pattern `"content"\\s*:"` (compact JSON: no space after the colon). A request with
`n_predict: 0` only warms the cache with new extra chunks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, model_validator

from edgespec.api import Chunk, DoneEvent, GenerationStats, InfillPrompt, Speculator, TokenEvent
from edgespec.errors import ConfigError, EdgespecError
from edgespec.server.metrics import Metrics
from edgespec.server.openai import ApiError, CompletionRequest, edgespec_block
from edgespec.server.worker import QueueFull, Worker


class ExtraChunk(BaseModel):
    text: str
    filename: str = "tmp"  # llama.cpp's default


class InfillRequest(CompletionRequest):
    """llama.cpp's /infill body. Sampling defaults are llama.cpp's; fields it reads that change
    nothing here (`id_slot`, `cache_prompt`: the KV cache is always reused; `samplers`;
    `t_max_prompt_ms`, which llama.cpp does not apply either) are accepted and ignored."""

    input_prefix: str
    input_suffix: str
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: str = ""
    t_max_predict_ms: int = 0
    n_indent: int = Field(default=0, ge=0)
    response_fields: list[str] | None = None
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    stop: str | list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _n_predict(cls, doc: Any) -> Any:
        """llama.cpp's `n_predict` is OpenAI's `max_tokens` (-1: no limit but the context's;
        0: the prompt only, to warm the cache)."""
        if isinstance(doc, dict) and "n_predict" in doc:
            doc = dict(doc)
            n = doc.pop("n_predict")
            if not isinstance(n, int) or isinstance(n, bool):
                raise ValueError(f"n_predict must be a whole number, not {n!r}")
            doc["warm_only"] = n == 0
            doc["max_tokens"] = 1 if n == 0 else None if n < 0 else n
        return doc

    warm_only: bool = False

    @model_validator(mode="before")
    @classmethod
    def _empty_model(cls, doc: Any) -> Any:
        """An empty `model` is the one served, as llama-server takes it: llama.vim sends
        `"model": ""` unless one is configured (its check of the setting measures the
        setting's name, not its value)."""
        if isinstance(doc, dict) and doc.get("model") == "":
            return {k: v for k, v in doc.items() if k != "model"}
        return doc


@dataclass(frozen=True)
class FimParts:
    """A request's gap: its text around it, and which field a refusal names."""

    prefix: str
    suffix: str
    extra: tuple[Chunk, ...] = ()
    middle: str = ""
    field: str = "suffix"
    budget_s: float | None = None
    n_indent: int = 0


def fim_parts(req: Any) -> FimParts | None:
    """The gap a text completion asks to fill (None: a plain completion)."""
    if isinstance(req, InfillRequest):
        return FimParts(
            req.input_prefix,
            req.input_suffix,
            tuple(Chunk(c.text, c.filename) for c in req.input_extra),
            req.prompt,
            "input_suffix",
            req.t_max_predict_ms / 1000 if req.t_max_predict_ms > 0 else None,
            req.n_indent,
        )
    suffix = getattr(req, "suffix", None)
    if suffix is None:
        return None
    return FimParts(req.prompt, suffix)


def fim_prompt(spec: Speculator, parts: FimParts, max_tokens: int) -> InfillPrompt:
    try:
        return spec.infill_prompt(
            parts.prefix,
            parts.suffix,
            extra=parts.extra,
            middle=parts.middle,
            max_tokens=max_tokens,
        )
    except ConfigError as exc:
        raise ApiError(400, str(exc), param=parts.field) from exc


def answer(gen: Any, model: str, text: str, done: DoneEvent) -> dict[str, Any]:
    """llama.cpp's /infill answer (`to_json_non_oaicompat`), with edgespec's block."""
    req: InfillRequest = gen.req
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
        "stop_type": _stop_type(done),
        "stopping_word": "",
        "tokens_cached": stats.prompt_tokens + stats.generated,
        "timings": timings(stats),
        "edgespec": edgespec_block(stats),
    }
    return pick(doc, req.response_fields) if req.response_fields else doc


def timings(stats: GenerationStats) -> dict[str, Any]:
    """llama.cpp's `timings`, with its draft counters."""
    prompt_n = stats.prompt_tokens - stats.prompt_cached
    prompt_ms, predicted_ms = stats.prompt_s * 1000, stats.decode_s * 1000
    return {
        "cache_n": stats.prompt_cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms else 0.0,
        "predicted_n": stats.generated,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / stats.generated if stats.generated else 0.0,
        "predicted_per_second": 1000 * stats.generated / predicted_ms if predicted_ms else 0.0,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
    }


def pick(doc: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """llama.cpp's `response_fields`: only these fields, a nested one named by its path
    ("timings/prompt_n") at the top level; a path that is not there is left out."""
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


def _stop_type(done: DoneEvent) -> str:
    return "eos" if done.finish_reason == "stop" else "limit"


def _line(doc: dict[str, Any]) -> str:
    # Compact, as llama.cpp writes it (llama.vim looks for `"content":"`).
    return f"data: {json.dumps(doc, separators=(',', ':'))}\n\n"


async def stream(
    worker: Worker,
    spec: Speculator,
    gen: Any,
    model: str,
    metrics: Metrics,
    finished: Callable[[GenerationStats], None],
    out: asyncio.Queue[str | None],
) -> None:
    """llama.cpp's streamed /infill: a `data: {...}` line per piece of text with `stop`
    false, then one with `stop` true and the whole answer's counters (no `[DONE]`)."""
    parts: list[str] = []
    try:
        async with worker.turn():
            async for event in worker.events(gen.start(spec)):
                if isinstance(event, TokenEvent) and event.text and not gen.req.warm_only:
                    parts.append(event.text)
                    piece = {"index": 0, "content": event.text, "tokens": [event.token]}
                    await out.put(_line({**piece, "stop": False, "tokens_predicted": len(parts)}))
                elif isinstance(event, DoneEvent):
                    last = answer(gen, model, "".join(parts), event)
                    await out.put(_line({**last, "content": ""}))  # the text came in pieces
                    finished(event.stats)
    except QueueFull:
        await out.put(_line(_error(429, "too many requests are waiting; retry shortly")))
    except EdgespecError as exc:
        metrics.errors.labels("server_error").inc()
        await out.put(_line(_error(500, str(exc), "server_error")))
    await out.put(None)


def _error(status: int, message: str, kind: str = "rate_limit_error") -> dict[str, Any]:
    return ApiError(status, message, kind=kind).body()
