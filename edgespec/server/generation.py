"""A validated request made ready to run, each bad setting a 400 that names its field."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Hashable
from functools import partial
from typing import Any

from edgespec.api import (
    Event,
    SamplingParams,
    Speculator,
    TokenEvent,
    check_k,
    check_max_tokens,
    instruction_of,
)
from edgespec.errors import ConfigError, EdgespecError
from edgespec.options import DrafterKind, DrafterSpec
from edgespec.server import infill
from edgespec.server.logprobs import Logprobs
from edgespec.server.openai import ApiError, ChatRequest, CompletionRequest
from edgespec.server.structured import Structure, structure
from edgespec.server.toolcalls import ToolCallReader
from edgespec.text.grammar import GrammarConstraint

DEFAULT_MAX_TOKENS = 512  # for a request that names no length: a guess


class Generation:
    """A request ready to run; `client`: whose drafting memory it uses (None: the shared one)."""

    max_tokens: int

    def __init__(
        self,
        spec: Speculator,
        req: ChatRequest | CompletionRequest,
        client: Hashable = None,
    ) -> None:
        self.req = req
        self.client = client
        self.reports_cache = True  # its answer tells how much of the prompt was cached
        self.chat = isinstance(req, ChatRequest)
        # In the body and, as OpenAI does, a header.
        self.id = f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self._settings(spec, req)
        self.structure = Structure()
        self.constraint: GrammarConstraint | None = None  # the grammar, once compiled
        self.fim = infill.fim_parts(req)
        self.top_logprobs = _top_logprobs(req)
        self.logprobs = None  # what the response reports of them, when asked for
        if self.top_logprobs is not None:
            offset = 0 if isinstance(req, ChatRequest) else len(req.prompt)
            self.logprobs = Logprobs(spec.target, chat=self.chat, offset=offset)
        self.prediction: list[int] | None = None
        if isinstance(req, ChatRequest):
            self.structure = structure(req, spec.target)
            messages = [m.for_template() for m in req.messages]
            try:
                self.tokens = spec.prompt_tokens(messages, tools=self.structure.tools)
            except ConfigError as exc:
                raise ApiError(400, str(exc), param=exc.field or "messages") from exc
            self.instruction = instruction_of(messages)
            self.prediction = _prediction(spec, req)
        elif self.fim is not None:
            # No limit asked (/infill's n_predict -1): the layout leaves the default's room.
            until_full = isinstance(req, infill.InfillRequest) and req.until_full
            room = DEFAULT_MAX_TOKENS if until_full else self.max_tokens
            self.fill = infill.fim_prompt(spec, self.fim, room)
            self.tokens, self.instruction = self.fill.tokens, ""
            if until_full:
                self.max_tokens = spec.target.n_ctx  # the engine ends where the context is full
        else:
            self.tokens = spec.prompt_tokens(req.prompt, raw=True)
            self.instruction = req.prompt
        n_ctx = spec.target.n_ctx
        if not self.tokens:
            raise ApiError(400, "the prompt is empty", param="messages" if self.chat else "prompt")
        if len(self.tokens) >= n_ctx:
            raise ApiError(
                400,
                f"the prompt has {len(self.tokens)} tokens but the context holds {n_ctx}",
                param="messages" if self.chat else "prompt",
                code="context_length_exceeded",
            )

    def _settings(self, spec: Speculator, req: ChatRequest | CompletionRequest) -> None:
        try:
            self.sampling = SamplingParams(
                temperature=req.temperature,
                top_k=req.top_k,
                top_p=req.top_p,
                min_p=req.min_p,
                seed=req.seed,
            )
            asked = [n for n in (req.max_completion_tokens, req.max_tokens) if n is not None]
            self.max_tokens = check_max_tokens(asked[0] if asked else DEFAULT_MAX_TOKENS)
            options = req.edgespec
            self.drafter = (options.drafter if options else None) or _default_drafter(spec)
        except ConfigError as exc:
            raise _bad_option(exc) from exc
        try:
            spec.drafter(self.drafter)  # unknown, or needs a draft model that is not loaded
        except EdgespecError as exc:
            raise ApiError(400, str(exc), param="drafter") from exc
        try:
            self.k = check_k(options.k) if options and options.k is not None else None
        except ConfigError as exc:
            raise _bad_option(exc) from exc

    def logprobs_of(self, event: TokenEvent) -> dict[str, Any] | None:
        """A chunk's `logprobs`: of the tokens whose text `event` returns (None: not asked)."""
        return None if self.logprobs is None else self.logprobs.block(self.logprobs.feed(event))

    def reader(self) -> ToolCallReader | None:
        """A fresh reader of tool calls out of the answer, where it may hold some."""
        if not self.structure.names:
            return None
        return ToolCallReader(self.structure.names, self.structure.stops)

    def start(self, spec: Speculator) -> Callable[[], Generator[Event, None, None]]:
        """What starts the generation on `spec` (a slot's pair), run in the slot's thread."""
        if self.fim is not None:
            return partial(
                spec.stream_infill,
                self.fill,
                drafter=self.drafter,
                k=self.k,
                max_tokens=self.max_tokens,
                stop=self.req.stops,
                sampling=self.sampling,
                budget_s=self.fim.budget_s,
                n_indent=self.fim.n_indent,
                client=self.client,
                logprobs=self.top_logprobs,
            )
        return partial(
            spec.stream,
            self.tokens,
            drafter=self.drafter,
            k=self.k,
            max_tokens=self.max_tokens,
            # A grammar decides where its text ends: a stop string would cut it.
            stop=() if self.structure.grammar is not None else self.req.stops,
            sampling=self.sampling,
            instruction=self.instruction,
            grammar=self.constraint,
            client=self.client,
            logprobs=self.top_logprobs,
            prediction=self.prediction,
        )


def _top_logprobs(req: ChatRequest | CompletionRequest) -> int | None:
    top = req.top_logprobs_asked
    if top is not None and isinstance(req, infill.InfillRequest):
        raise ApiError(400, "logprobs are not supported on /infill", param="logprobs")
    return top


def _prediction(spec: Speculator, req: ChatRequest) -> list[int] | None:
    """The predicted output as tokens; a 400 where it is larger than the context."""
    if not req.prediction:
        return None
    try:
        return spec.prediction_tokens(req.prediction)
    except ConfigError as exc:
        raise ApiError(400, str(exc), param="prediction", code="context_length_exceeded") from exc


def _default_drafter(spec: Speculator) -> DrafterSpec:
    return spec.plan.drafter if spec.plan is not None else DrafterSpec(name=DrafterKind.AUTO)


def _bad_option(exc: ConfigError) -> ApiError:
    """A 400 naming the option's field (edgespec's own sit in the request's `edgespec`)."""
    param = f"edgespec.{exc.field}" if exc.field == "k" else exc.field
    return ApiError(400, str(exc), param=param)
