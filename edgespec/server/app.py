"""The HTTP routes: OpenAI's chat and text completions (streamed or not), models, health and
metrics, with its error bodies, an optional API key, a body-size limit and a fair queue."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Hashable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from edgespec.api import (
    DoneEvent,
    Event,
    GenerationStats,
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
from edgespec.server.compiling import Compiler, CompilesBusy
from edgespec.server.logprobs import Logprobs
from edgespec.server.metrics import Metrics
from edgespec.server.openai import (
    FINISH,
    ApiError,
    ChatRequest,
    CompletionRequest,
    completion_id,
    edgespec_block,
    now,
    refused,
    usage,
)
from edgespec.server.openai import Request as OpenAIRequest
from edgespec.server.structured import Structure, structure
from edgespec.server.toolcalls import CallPart, ToolCallReader
from edgespec.server.worker import QueueFull, Worker
from edgespec.system import settings
from edgespec.text.grammar import GrammarConstraint, GrammarError

MAX_BODY = 1_000_000
# For the whole body: a client that sends it slower holds a connection for nothing.
BODY_TIMEOUT_S = 30.0
# A stream's chunks wait here for their client; the generation waits when it is full.
STREAM_BUFFER = 64
# A client that takes longer than this to take one chunk has stopped reading: its stream ends
# and the worker goes on to the next request.
SEND_TIMEOUT_S = 30.0
T = TypeVar("T")
DEFAULT_MAX_TOKENS = 512
Log = Callable[[str, str, int, GenerationStats | None], None]


class _Generation:
    """A validated request, ready to run: the prompt's tokens and how to generate, and whose
    drafting memory it uses (None: the one all clients share)."""

    def __init__(
        self,
        spec: Speculator,
        req: ChatRequest | CompletionRequest,
        client: Hashable = None,
    ) -> None:
        self.req = req
        self.client = client
        self.chat = isinstance(req, ChatRequest)
        self.id = completion_id(self.chat)  # in the body and, as OpenAI does, a header
        self._settings(spec, req)
        self.structure = Structure()
        self.constraint: GrammarConstraint | None = None  # the grammar, once compiled
        self.fim = None if self.chat else infill.fim_parts(req)
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
            self.fill = infill.fim_prompt(spec, self.fim, self.max_tokens)
            self.tokens, self.instruction = self.fill.tokens, ""
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
        """Sampling, length, drafter and K, each refused with a 400 naming its field."""
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

    def start(self, spec: Speculator) -> Callable[[], Generator[Event, None, None]]:
        def run() -> Generator[Event, None, None]:
            if self.fim is not None:
                return spec.stream_infill(
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
            return spec.stream(
                self.tokens,
                drafter=self.drafter,
                k=self.k,
                max_tokens=self.max_tokens,
                # A stop string would cut a grammar's text: the grammar decides where the
                # answer ends (the text of an "auto" answer ends at them: see _answer).
                stop=() if self.structure.grammar is not None else self.req.stops,
                sampling=self.sampling,
                instruction=self.instruction,
                grammar=self.constraint,
                client=self.client,
                logprobs=self.top_logprobs,
                prediction=self.prediction,
            )

        return run


def _top_logprobs(req: ChatRequest | CompletionRequest) -> int | None:
    """How many alternatives each token's logprob comes with (None: no logprobs)."""
    top = req.top_logprobs_asked
    if top is not None and isinstance(req, infill.InfillRequest):
        raise ApiError(400, "logprobs are not supported on /infill", param="logprobs")
    return top


def _prediction(spec: Speculator, req: ChatRequest) -> list[int] | None:
    """The request's predicted output as tokens; a 400 naming `prediction` where it is larger
    than the context."""
    if not req.prediction:
        return None
    try:
        return spec.prediction_tokens(req.prediction)
    except ConfigError as exc:
        raise ApiError(400, str(exc), param="prediction", code="context_length_exceeded") from exc


def _default_drafter(spec: Speculator) -> DrafterSpec:
    return spec.plan.drafter if spec.plan is not None else DrafterSpec(name=DrafterKind.AUTO)


def _bad_option(exc: ConfigError) -> ApiError:
    """A 400 naming the request's field the option's error is about (edgespec's own options
    sit in the request's `edgespec` object)."""
    param = f"edgespec.{exc.field}" if exc.field == "k" else exc.field
    return ApiError(400, str(exc), param=param)


async def _parse(request: Request, model: type[OpenAIRequest]) -> Any:
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


def create_app(
    spec: Speculator,
    *,
    model_names: Sequence[str],
    api_key: str | None = None,
    queue: int = 16,
    log: Log | None = None,
    host: str = "127.0.0.1",
    cors: Sequence[str] = (),
    shared_memory: bool = False,
    slots: int = 1,
) -> FastAPI:
    """`host`: the address served, which decides the Host names accepted; `cors`: the web
    origins whose pages may call the API (none: only clients that are not web pages);
    `shared_memory`: every client drafts from every client's earlier texts (else each API key
    and `user` from its own); `slots`: how many requests run at once, their target passes
    shared (the models loaded with as many sequences)."""
    app = FastAPI(title="edgespec", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics()
    worker = Worker(spec, queue, metrics.generation, slots)
    metrics.queue.set_function(lambda: worker.waiting)
    say: Log = log or (lambda *args: None)
    _guard_and_errors(app, api_key, metrics, say, _Callers(host, cors))
    if cors:
        # Added last, so it runs first: it answers the browsers' preflight requests.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
        )
    _info_routes(app, model_names, metrics)
    serving = _Serving(spec, worker, metrics, model_names, say, shared_memory)
    _completion_routes(app, serving)
    app.state.worker, app.state.metrics, app.state.compiler = worker, metrics, serving.compiler
    return app


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class _Callers:
    """Which requests may come from where: a web page elsewhere must not drive a server on
    this machine, neither through its own origin nor by a DNS name rebound to 127.0.0.1."""

    def __init__(self, host: str, cors: Sequence[str]) -> None:
        name = _bare(host)
        # A wildcard address serves every name this machine has: no Host to hold it to.
        self.any_host = name in ("", "0.0.0.0", "::")
        self.hosts = _LOOPBACK_NAMES | {name}
        self.origins = frozenset(o.rstrip("/").lower() for o in cors)

    def refusal(self, request: Request) -> str | None:
        host = request.headers.get("host", "")
        if not self.any_host and _bare(host) not in self.hosts:
            return f"the Host {host!r} is not served here; use http://127.0.0.1 or --host"
        # This server serves no pages, so a request that names an origin comes from another
        # site's page, allowed only by --cors.
        origin = request.headers.get("origin")
        if origin is None or origin.rstrip("/").lower() in self.origins or "*" in self.origins:
            return None
        return f"web pages from {origin!r} may not call this server; see --cors"


def _bare(host: str) -> str:
    """The name in a Host header or --host value, without port or brackets."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1:].partition("]")[0]
    if name.count(":") == 1:
        name = name.partition(":")[0]
    return name.rstrip(".")


def _guard_and_errors(
    app: FastAPI, api_key: str | None, metrics: Metrics, say: Log, callers: _Callers
) -> None:
    """Who may call, the API key, one log line and count per request, and OpenAI's error body
    for every error (no traceback reaches a client unless EDGESPEC_DEBUG=1)."""

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        refused = callers.refusal(request)
        if refused is not None:
            error = ApiError(403, refused, kind="permission_error", code="forbidden")
            return _answer_error(request, error, metrics, say)
        if api_key is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                error = ApiError(401, "missing or wrong API key", code="invalid_api_key")
                return _answer_error(request, error, metrics, say)
        try:
            response: Response = await call_next(request)
        except Exception:
            # Answered by `unexpected` below, outside this middleware: counted and logged here.
            metrics.requests.labels(_endpoint(request), "500").inc()
            say(request.method, request.url.path, 500, None)
            raise
        metrics.requests.labels(_endpoint(request), str(response.status_code)).inc()
        if request.url.path not in _GENERATING or response.status_code != 200:
            say(request.method, request.url.path, response.status_code, None)
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        metrics.errors.labels(exc.kind).inc()
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        error = ApiError(exc.status_code, str(exc.detail), code=code)
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        if settings.debug():
            raise exc
        metrics.errors.labels("server_error").inc()
        error = ApiError(500, f"internal error: {type(exc).__name__}", kind="server_error")
        return JSONResponse(error.body(), status_code=500)


def _info_routes(app: FastAPI, model_names: Sequence[str], metrics: Metrics) -> None:
    created = now()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {"id": n, "object": "model", "created": created, "owned_by": "edgespec"}
            for n in model_names
        ]
        return {"object": "list", "data": data}


class _Serving:
    """What the completion routes share."""

    def __init__(
        self,
        spec: Speculator,
        worker: Worker,
        metrics: Metrics,
        names: Sequence[str],
        say: Log,
        shared_memory: bool,
    ) -> None:
        self.shared_memory = shared_memory
        self.spec = spec
        self.worker = worker
        self.metrics = metrics
        self.names = names
        self.say = say
        self.compiler = Compiler()

    async def _compile(self, gen: _Generation) -> None:
        """The request's grammar compiled, outside the worker's turn (a 400 naming its field
        where it cannot be used or takes too long, a 429 where compiles are all busy). Each
        tool's arguments are compiled alone first, to name the tool at fault: a call it may
        never make (with "auto") still has to be one it could."""
        if gen.structure.grammar is None:
            return
        tokenizer = self.spec.target.grammar_tokenizer
        steps = [*gen.structure.parts, (gen.structure.param, gen.structure.grammar)]
        for param, grammar in steps:
            try:
                gen.constraint = await self.compiler.compile(grammar, tokenizer)
            except CompilesBusy:
                raise _busy() from None
            except GrammarError as exc:
                raise ApiError(400, str(exc), param=param) from exc

    def _client(self, request: Request, req: OpenAIRequest) -> Hashable:
        """Whose drafting memory a request uses: its API key's and `user`'s (a digest, not
        the key itself), or None with --shared-memory."""
        if self.shared_memory:
            return None
        key = hashlib.sha256(request.headers.get("authorization", "").encode()).hexdigest()
        return (key, req.user or "")

    async def _whole(self, gen: _Generation) -> tuple[str, DoneEvent]:
        """A whole answer, once its generation has wound down in its slot's thread (what it
        learned kept), not while the slot runs on."""
        async with self.worker.turn(gen.client) as lane:
            answer = await _collect(self.worker, lane, gen)
            await self.worker.settled(lane)
            return answer

    async def complete(
        self,
        request: Request,
        shape: type[OpenAIRequest],
        full: Callable[..., dict[str, Any]] | None = None,
        streamed: Callable[..., Awaitable[None]] | None = None,
    ) -> Response:
        """`full` and `streamed` make the answer in another shape than OpenAI's (/infill)."""
        req = await _parse(request, shape)
        if (refusal := refused(req)) is not None:
            raise refusal
        if req.model is not None and req.model not in self.names:
            raise ApiError(
                404,
                f"model {req.model!r} is not served here; GET /v1/models lists it",
                param="model",
                code="model_not_found",
            )
        # Tokenizing may wait for the running generation (a target on RPC servers answers one
        # call at a time): in a thread, so that the event loop goes on serving meanwhile.
        gen = await asyncio.to_thread(_Generation, self.spec, req, self._client(request, req))
        if self.worker.full():  # refused before a stream starts, and before any compile
            raise _busy()
        await self._compile(gen)
        name, path = req.model or self.names[0], request.url.path
        if req.stream:
            stats: list[GenerationStats] = []
            stream = streamed or _stream

            def logged(whole: bool) -> None:  # once, when the stream has ended
                if not whole:
                    self.say("POST", path, 499, None)  # as for a whole answer
                elif stats:  # else it ended with an error, already in the stream
                    self.say("POST", path, 200, stats[0])

            return _EventStream(
                partial(stream, self.worker, self.spec, gen, name, self.metrics, stats.append),
                {"x-request-id": gen.id},
                logged,
            )

        gone = asyncio.ensure_future(_gone(request.receive))
        try:
            text, finished = await _unless_gone(gone, self._whole(gen))
        except QueueFull:
            raise _busy() from None
        except _Gone:
            # Nobody to answer: the generation stopped (or never started, if it waited). The
            # middleware logs the 499.
            return Response(status_code=499)
        finally:
            gone.cancel()
        self.say("POST", path, 200, finished.stats)
        return JSONResponse(
            (full or _full_response)(gen, name, text, finished), headers={"x-request-id": gen.id}
        )


class _Gone(Exception):
    """The client disconnected before its answer was ready."""


async def _gone(receive: Receive) -> None:
    """Returns once the client has disconnected (its body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(gone: asyncio.Future[None], work: Awaitable[T]) -> T:
    """`work`'s result, or _Gone as soon as `gone` (the client disconnected), `work` then
    cancelled: a waiting request leaves the queue, a running one stops its generation within a
    round."""
    task = asyncio.ensure_future(work)
    either: set[asyncio.Future[Any]] = {task, gone}
    try:
        done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    raise _Gone


class _EventStream(Response):
    """Server-sent events made by `produce` in a task of its own, which holds the worker's turn
    and fills a small buffer that this response sends from. A client that leaves, or takes
    longer than SEND_TIMEOUT_S to take a chunk, ends the task, and so frees the worker, at
    once: a suspended generator would hold the turn until the garbage collector closed it.
    `ended` is told once whether the client took the whole answer."""

    def __init__(
        self,
        produce: Callable[[asyncio.Queue[str | None]], Awaitable[None]],
        headers: dict[str, str],
        ended: Callable[[bool], None],
    ) -> None:
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers(headers)  # without a body: no content-length
        self.produce = produce
        self.ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        buffer: asyncio.Queue[str | None] = asyncio.Queue(STREAM_BUFFER)

        async def feed() -> None:
            try:
                await self.produce(buffer)
            except Exception:
                await buffer.put(None)  # the answer ends here (cut short); the error is logged
                raise

        producer = asyncio.ensure_future(feed())
        gone = asyncio.ensure_future(_gone(receive))
        try:
            start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            await send(start)
            while (chunk := await _unless_gone(gone, buffer.get())) is not None:
                body = {"type": "http.response.body", "body": chunk.encode(), "more_body": True}
                await asyncio.wait_for(send(body), SEND_TIMEOUT_S)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (_Gone, OSError, asyncio.TimeoutError):
            # The client left or stopped reading: nobody to finish the answer for.
            self.ended(False)
        else:
            self.ended(True)
        finally:
            gone.cancel()
            producer.cancel()


def _completion_routes(app: FastAPI, serving: _Serving) -> None:
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serving.complete(request, ChatRequest)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serving.complete(request, CompletionRequest)

    @app.post("/infill")
    async def fill_in_the_middle(request: Request) -> Response:
        return await serving.complete(request, infill.InfillRequest, infill.answer, infill.stream)


_GENERATING = frozenset({"/v1/chat/completions", "/v1/completions", "/infill"})
_ENDPOINTS = frozenset({"/health", "/metrics", "/v1/models"}) | _GENERATING


def _endpoint(request: Request) -> str:
    """The metrics label of a request: its route, never the path a caller made up (each new
    label is a series kept for good)."""
    path = request.url.path
    return path if path in _ENDPOINTS else "other"


def _answer_error(request: Request, error: ApiError, metrics: Metrics, say: Log) -> Response:
    metrics.errors.labels(error.kind).inc()
    metrics.requests.labels(_endpoint(request), str(error.status)).inc()
    say(request.method, request.url.path, error.status, None)
    return JSONResponse(error.body(), status_code=error.status)


async def _answer(
    worker: Worker, spec: Speculator, gen: _Generation
) -> AsyncIterator[TokenEvent | DoneEvent]:
    """The generation's tokens, then how it ended. The text of an "auto" answer ends at its
    first stop string (the reader cuts it off the content): the generation is ended there, as
    the engine would have ended it, but a call's arguments are not looked at."""
    watch = _reader(gen) if gen.structure.stops else None
    events = worker.events(gen.start(spec), spec)
    tokens = 0
    try:
        async for event in events:
            if isinstance(event, DoneEvent):
                yield event
                return
            if isinstance(event, TokenEvent):
                tokens += 1
                yield event
                if watch is not None:
                    watch.feed(event.text)
                    if watch.stopped:
                        break
    finally:
        await events.aclose()  # a generation left early stops within a round
    await worker.settled(spec)
    assert spec.session.last_stats is not None
    # Counted as the engine counts a stop string's tokens: up to the one that completed it.
    yield DoneEvent(finish_reason="stop", stats=replace(spec.session.last_stats, generated=tokens))


async def _collect(worker: Worker, spec: Speculator, gen: _Generation) -> tuple[str, DoneEvent]:
    parts: list[str] = []
    done: DoneEvent | None = None
    try:
        async for event in _answer(worker, spec, gen):
            if isinstance(event, TokenEvent):
                parts.append(event.text)
                if gen.logprobs is not None:
                    gen.logprobs.feed(event)
            elif isinstance(event, DoneEvent):
                done = event
    except GrammarError as exc:  # a grammar that failed once followed (past its limits)
        raise ApiError(400, str(exc), param=gen.structure.param) from exc
    except EdgespecError as exc:
        raise ApiError(500, str(exc), kind="server_error") from exc
    assert done is not None
    return "".join(parts), done


def _reader(gen: _Generation) -> ToolCallReader | None:
    """What reads tool calls out of the answer, where it may hold some."""
    if not gen.structure.calls:
        return None
    return ToolCallReader(gen.structure.names, gen.structure.stops)


def _finish(done: DoneEvent, reader: ToolCallReader | None) -> str:
    finish = FINISH.get(done.finish_reason, "stop")
    return "tool_calls" if reader is not None and reader.calls and finish == "stop" else finish


def _message(text: str, reader: ToolCallReader | None) -> dict[str, Any]:
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


def _full_response(gen: _Generation, model: str, text: str, done: DoneEvent) -> dict[str, Any]:
    reader = _reader(gen)
    logprobs = None if gen.logprobs is None else gen.logprobs.block(gen.logprobs.returned)
    if gen.chat:
        choice: dict[str, Any] = {"index": 0, "message": _message(text, reader)}
    else:
        choice = {"index": 0, "text": text}
    choice["logprobs"] = logprobs
    choice["finish_reason"] = _finish(done, reader)
    return {
        "id": gen.id,
        "object": "chat.completion" if gen.chat else "text_completion",
        "created": now(),
        "model": model,
        "choices": [choice],
        "usage": usage(done.stats),
        "edgespec": edgespec_block(done.stats),
    }


async def _stream(
    worker: Worker,
    spec: Speculator,
    gen: _Generation,
    model: str,
    metrics: Metrics,
    finished: Callable[[GenerationStats], None],
    out: asyncio.Queue[str | None],
) -> None:
    """Server-sent events in OpenAI's chunk format into `out`, ending with `data: [DONE]` and
    None."""
    base = {
        "id": gen.id,
        "object": "chat.completion.chunk" if gen.chat else "text_completion",
        "created": now(),
        "model": model,
    }

    reader = _reader(gen)
    chunk = partial(_chunk, gen, base)

    async def send(parts: list[str | CallPart], logprobs: dict[str, Any] | None = None) -> None:
        for part in parts:
            await out.put(_event(chunk(part, logprobs=logprobs)))

    try:
        async with worker.turn(gen.client) as spec:
            if gen.chat:
                await out.put(_event({**base, "choices": [_first_choice()]}))
            async for event in _answer(worker, spec, gen):
                if isinstance(event, TokenEvent):
                    logprobs = gen.logprobs_of(event)  # a token held back comes later
                    if event.text:
                        await send(reader.feed(event.text) if reader else [event.text], logprobs)
                elif isinstance(event, DoneEvent):
                    await send(reader.end() if reader else [])
                    # The last content chunk says how it went; OpenAI's usage-only chunk
                    # follows when the client asked for it.
                    last = chunk(None, _finish(event, reader))
                    last["usage"] = usage(event.stats)
                    last["edgespec"] = edgespec_block(event.stats)
                    await out.put(_event(last))
                    if gen.req.stream_options and gen.req.stream_options.include_usage:
                        await out.put(_event({**base, "choices": [], "usage": usage(event.stats)}))
                    finished(event.stats)
    except QueueFull:
        await out.put(_event(_busy().body()))
    except GrammarError as exc:
        await out.put(_event(ApiError(400, str(exc), param=gen.structure.param).body()))
    except EdgespecError as exc:
        metrics.errors.labels("server_error").inc()
        await out.put(_event(ApiError(500, str(exc), kind="server_error").body()))
    await out.put("data: [DONE]\n\n")
    await out.put(None)


def _chunk(
    gen: _Generation,
    base: dict[str, Any],
    part: str | CallPart | None,
    finish: str | None = None,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if gen.chat:
        choice: dict[str, Any] = {"index": 0, "delta": _delta(part)}
    else:
        choice = {"index": 0, "text": part or ""}
    choice["logprobs"] = logprobs
    choice["finish_reason"] = finish
    return {**base, "choices": [choice]}


def _first_choice() -> dict[str, Any]:
    return {"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}


def _delta(part: str | CallPart | None) -> dict[str, Any]:
    """A stream chunk's delta: text, or part of a tool call as OpenAI streams it (its id and
    name first, then its arguments in fragments)."""
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


def _busy() -> ApiError:
    return ApiError(
        429,
        "too many requests are waiting; retry shortly",
        kind="rate_limit_error",
        headers={"Retry-After": "1"},
    )
