"""Fill-in-the-middle requests: OpenAI's legacy `suffix` on /v1/completions, and llama.cpp's
/infill body as llama.vim sends it (read in ggml-org/llama.vim, autoload/llama.vim at commit
a1c8e6e40cb45df59b78add5b65d575386832465), so that editor plugins written for llama-server
work unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, model_validator

from edgespec.api import Chunk, InfillPrompt, Speculator
from edgespec.errors import ConfigError
from edgespec.server.openai import ApiError, CompletionRequest


class ExtraChunk(BaseModel):
    text: str
    filename: str = "tmp"  # llama.cpp's default


class InfillRequest(CompletionRequest):
    """llama.cpp's /infill body, with its sampling defaults. Fields that change nothing here
    (`id_slot`, `cache_prompt`: the KV cache is always reused; `samplers`; `t_max_prompt_ms`,
    which llama.cpp does not apply either) are accepted and ignored."""

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
    warm_only: bool = False  # n_predict 0
    until_full: bool = False  # n_predict -1

    @model_validator(mode="before")
    @classmethod
    def _n_predict(cls, doc: Any) -> Any:
        """llama.cpp's `n_predict` is OpenAI's `max_tokens` (-1: no limit, until the context
        is full; 0: the prompt only, to warm the cache with new extra chunks)."""
        if isinstance(doc, dict) and "n_predict" in doc:
            doc = dict(doc)
            n = doc.pop("n_predict")
            if not isinstance(n, int) or isinstance(n, bool):
                raise ValueError(f"n_predict must be a whole number, not {n!r}")
            doc["warm_only"] = n == 0
            doc["until_full"] = n < 0
            doc["max_tokens"] = 1 if n == 0 else None if n < 0 else n
        return doc

    @model_validator(mode="before")
    @classmethod
    def _empty_model(cls, doc: Any) -> Any:
        """An empty `model` is the one served, as llama-server takes it: llama.vim sends
        `"model": ""` unless one is configured."""
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
