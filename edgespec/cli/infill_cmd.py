"""`edgespec infill`: fill in the middle of a file at a cursor, the completion on stdout (for
shells, scripts and editors that run a command)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from edgespec.api import Chunk, Drafting, check_max_tokens
from edgespec.cli import loading
from edgespec.cli.options import (
    DEFAULT_MODELS,
    DEFAULT_SAMPLING,
    DrafterName,
    DraftTokens,
    MaxTokens,
    ModelOptions,
    RawControl,
    Recalibrate,
    SamplingOptions,
    Stats,
    Stop,
    with_shared_options,
)
from edgespec.cli.render import TextRenderer
from edgespec.cli.run_cmd import (
    _after_answer,
    _render,
    drafter_label,
    larger_context,
    read_stdin,
    stdin_limit,
)
from edgespec.errors import ConfigError
from edgespec.text import bounded_input as bounded

Line = Annotated[int | None, typer.Option("--line", help="The cursor's line (from 1).")]
Column = Annotated[
    int | None,
    typer.Option("--column", help="The cursor's column in characters (from 1; default: the end)."),
]
Cursor = Annotated[
    int | None, typer.Option("--cursor", help="The cursor as a character offset (from 0).")
]
Extra = Annotated[
    list[Path] | None,
    typer.Option("--extra", help="Another file the model reads as context (repeatable)."),
]
Budget = Annotated[
    int | None,
    typer.Option(
        "--time-budget-ms", help="Stop at the first newline after this long (llama.cpp's)."
    ),
]


def read_file(name: str, limit: int) -> str:
    """A text file, or stdin for `-`, of at most `limit` characters (what the context could
    hold: run's cap for stdin)."""
    if name == "-":
        text = read_stdin(limit)
        if text is None:
            raise ConfigError("`-` reads the file from stdin, but stdin is a terminal")
        return text
    return bounded.read_file(Path(name), limit, name, larger_context(limit))


def cursor_offset(text: str, line: int | None, column: int | None, cursor: int | None) -> int:
    """Where the cursor is, as an offset into `text`: the end of the file unless told."""
    if cursor is not None:
        if line is not None or column is not None:
            raise ConfigError("--cursor excludes --line and --column")
        if not 0 <= cursor <= len(text):
            raise ConfigError(f"--cursor must be from 0 to {len(text)} (the file's length)")
        return cursor
    if line is None:
        if column is not None:
            raise ConfigError("--column needs --line")
        return len(text)
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        raise ConfigError(f"--line must be from 1 to {len(lines)}, got {line}")
    width = len(lines[line - 1])
    col = width + 1 if column is None else column
    if not 1 <= col <= width + 1:
        raise ConfigError(f"--column must be from 1 to {width + 1} on line {line}, got {col}")
    return sum(len(s) + 1 for s in lines[: line - 1]) + col - 1


@with_shared_options()
def infill(
    file: Annotated[str, typer.Argument(help="The file to complete in; `-` reads stdin.")],
    line: Line = None,
    column: Column = None,
    cursor: Cursor = None,
    extra: Extra = None,
    time_budget_ms: Budget = None,
    models: ModelOptions = DEFAULT_MODELS,
    drafter: DrafterName = "auto",
    draft_tokens: DraftTokens = None,
    sampling: SamplingOptions = DEFAULT_SAMPLING,
    max_tokens: MaxTokens = 128,
    stop: Stop = None,
    recalibrate: Recalibrate = False,
    stats: Stats = False,
    raw_control: RawControl = False,
) -> None:
    """Fill in the middle at a cursor with the model's FIM tokens: the completion goes to
    stdout, ending where the code after the cursor starts again."""
    params = sampling.params()
    check_max_tokens(max_tokens)
    limit = stdin_limit(models.ctx_size)
    text = read_file(file, limit)
    at = cursor_offset(text, line, column, cursor)
    chunks = [Chunk(read_file(str(p), limit), p.name) for p in extra or ()]
    options = models.decode(recalibrate=recalibrate, calibrate_later=True)
    drafting = Drafting.of(drafter, draft_tokens)
    spec = loading.load(options, drafting)
    prompt = spec.infill_prompt(text[:at], text[at:], extra=chunks, max_tokens=max_tokens)
    events = spec.stream_infill(
        prompt,
        drafter=drafting.drafter,
        k=drafting.k,
        max_tokens=max_tokens,
        stop=stop or (),
        sampling=params,
        budget_s=time_budget_ms / 1000 if time_budget_ms else None,
    )
    done = _render(events, TextRenderer(sys.stdout, False, raw_control))
    label = drafter_label(spec, drafting) if stats else None
    _after_answer(spec, done, label, max_tokens)
