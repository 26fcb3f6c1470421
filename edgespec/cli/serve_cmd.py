"""`edgespec serve`: an OpenAI-compatible local server over one loaded pair."""

from __future__ import annotations

import ipaddress
import json
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.panel import Panel

from edgespec.api import Drafting, GenerationStats, Speculator
from edgespec.cli import loading
from edgespec.cli.console import err
from edgespec.cli.options import (
    DEFAULT_MODELS,
    DrafterName,
    DraftTokens,
    Memory,
    ModelOptions,
    PairArgument,
    Parallel,
    with_shared_options,
)
from edgespec.errors import ConfigError
from edgespec.models.stores import store_name
from edgespec.system import settings

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

GRACEFUL_S = 30  # a guess
CONNECTIONS = 128  # a guess
KEEP_ALIVE_S = 5  # uvicorn's default
Host = Annotated[str, typer.Option("--host", help="Address to listen on.")]
Port = Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")]
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", envvar=settings.API_KEY, help="Require 'Bearer KEY'."),
]
ApiKeyFile = Annotated[
    Path | None,
    typer.Option(
        "--api-key-file",
        metavar="FILE",
        help="Require one of the keys in FILE (one a line), each key its own client.",
    ),
]
Queue = Annotated[int, typer.Option("--queue", min=0, help="Requests that may wait their turn.")]
SharedMemory = Annotated[
    bool,
    typer.Option(
        "--shared-memory",
        help="Let every client draft from every client's earlier answers (default: each API "
        "key and 'user' from its own).",
    ),
]
MetricsRoute = Annotated[
    bool,
    typer.Option(
        "--metrics",
        help="Serve GET /metrics (Prometheus): counters of every client's requests together.",
    ),
]
JsonLog = Annotated[
    bool,
    typer.Option("--json", help="The request log as JSON lines on stdout, answers' stats too."),
]
Cors = Annotated[
    list[str] | None,
    typer.Option(
        "--cors",
        metavar="ORIGIN",
        help="Let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable.",
    ),
]


@with_shared_options(pair=PairArgument)
def serve(
    models: ModelOptions = DEFAULT_MODELS,
    host: Host = "127.0.0.1",
    port: Port = 8080,
    api_key: ApiKey = None,
    api_key_file: ApiKeyFile = None,
    memory: Memory = None,
    drafter: DrafterName = "auto",
    draft_tokens: DraftTokens = None,
    queue: Queue = 16,
    parallel: Parallel = None,
    cors: Cors = None,
    shared_memory: SharedMemory = False,
    metrics: MetricsRoute = False,
    json_out: JsonLog = False,
) -> None:
    """Serve the OpenAI API (chat and text completions) with speculative decoding."""
    from edgespec.server import create_app
    from edgespec.server.arenas import cap_malloc_arenas

    cap_malloc_arenas()  # before loading starts any thread
    keys = _check_access(api_key, api_key_file, cors or ())
    if memory is not None and not shared_memory:
        _keep_clients_apart(Path(memory).expanduser())
    options = models.decode(memory=memory, parallel=parallel)
    spec = loading.load(options, Drafting.of(drafter, draft_tokens))
    assert spec.plan is not None
    target = models.pair or store_name(models.target) or spec.plan.target.stem
    names = [target, spec.plan.target.name, "edgespec"]
    app = create_app(
        spec,
        model_names=names,
        api_key=api_key,
        api_keys=keys,
        queue=queue,
        log=_json_line if json_out else _log_line,
        host=host,
        cors=cors or (),
        shared_memory=shared_memory,
        slots=spec.plan.resources.slots,
        metrics=metrics,
    )
    _announce(spec, names[0], host, port, queue, api_key is not None or bool(keys))
    _run_until_stopped(server_config(app, host, port))
    app.state.worker.close()  # a generation still in its slot's thread decodes with the models
    spec.close()
    err.print("edgespec serve: stopped", style="dim")


def _check_access(api_key: str | None, key_file: Path | None, cors: Sequence[str]) -> list[str]:
    """The keys of `key_file` (none: no file); the keys and the allowed origins are refused
    before any model loads when malformed."""
    from edgespec.server.identity import read_keys

    if api_key is not None and not api_key.strip():
        raise ConfigError("--api-key is empty")
    keys = read_keys(key_file) if key_file is not None else []
    for origin in cors:
        if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin.rstrip("/")):
            raise ConfigError(f"--cors {origin!r} is not an origin like http://localhost:3000")
    return keys


def _keep_clients_apart(folder: Path) -> None:
    """A --memory DIR from before clients' texts were kept apart: its texts, whose clients
    cannot be told apart, set apart so that no client drafts from another's."""
    from edgespec.text.project_memory import set_apart_unattributed

    moved = set_apart_unattributed(folder)
    if moved:
        err.print(
            f"edgespec serve: --memory {folder} held texts of clients that cannot be told apart: "
            f"moved to {moved[0].parent}, which no client drafts from (move a file back into "
            f"{folder} to share it with every client)",
            style="yellow",
        )


def _run_until_stopped(config: uvicorn.Config) -> None:
    import uvicorn

    # uvicorn shuts down gracefully on Ctrl-C or SIGTERM (stop accepting, finish the streams),
    # then raises the signal again for whatever handler was there before; ours makes that a
    # clean exit 0.
    before = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def server_config(app: FastAPI, host: str, port: int) -> uvicorn.Config:
    import uvicorn

    from edgespec.server.protocol import HeadTimeout

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=HeadTimeout,  # a request's head (line and headers) has HEAD_TIMEOUT_S to arrive
        log_level="warning",
        access_log=False,
        # More connections than this at once get 503 at once instead of each holding memory.
        limit_concurrency=CONNECTIONS,
        # An idle connection between requests is closed after this many seconds.
        timeout_keep_alive=KEEP_ALIVE_S,
        # Streams get this long to finish at Ctrl-C or SIGTERM; then the server stops anyway.
        timeout_graceful_shutdown=GRACEFUL_S,
    )


def _announce(spec: Speculator, name: str, host: str, port: int, queue: int, keyed: bool) -> None:
    assert spec.plan is not None
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/v1"
    err.print(
        Panel.fit(
            f"[bold]{url}[/]  (model name {name!r})\ntarget {spec.plan.target.name}"
            + (f"\ndraft  {spec.plan.draft.name}" if spec.plan.draft else "")
            + f"\ndrafter {spec.plan.drafter.label}, context {spec.target.n_ctx}, queue {queue}, "
            + f"slots {spec.plan.resources.slots}"
            + (", API key required" if keyed else ""),
            title="edgespec serve",
        )
    )
    if not keyed and not _loopback(host):
        err.print(
            f"warning: listening on {host} without --api-key: anyone who can reach this "
            "machine can use the model",
            style="yellow",
        )


def _stopped(signum: int, frame: object) -> None:
    pass


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _log_line(method: str, path: str, status: int, stats: GenerationStats | None) -> None:
    # The path is the caller's, percent-decoded: its control characters (an escape sequence
    # that clears the screen) are shown escaped, never sent to the terminal.
    line = f"{_printable(method)} {_printable(path)} {status}"
    if stats is not None:
        line += (
            f" · {stats.generated} tokens, {stats.tokens_per_s:.1f} tok/s, "
            f"acceptance {stats.acceptance_rate:.0%}"
        )
    err.print(line, markup=False, highlight=False)


def _json_line(method: str, path: str, status: int, stats: GenerationStats | None) -> None:
    """The access log as JSON lines on stdout; an answer's with its stats, its lane's too (the
    K chosen, its passes' tokens and the wait per pass)."""
    doc: dict[str, object] = {"method": method, "path": path, "status": status}
    if stats is not None:
        doc["stats"] = {"lane": stats.lane, **stats.as_dict()}
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _printable(text: str) -> str:
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
