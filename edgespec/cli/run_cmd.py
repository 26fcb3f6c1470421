"""`edgespec run`: generate from a prompt (argument, stdin or both), streaming to stdout."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from edgespec import SamplingParams
from edgespec.api import DRAFTERS, DecodeOptions
from edgespec.cli import loading
from edgespec.cli.console import err
from edgespec.cli.options import CtxSize, Draft, GpuLayers, Offline, Pair, Target, Threads
from edgespec.cli.render import JsonRenderer, TextRenderer, stats_line
from edgespec.engine.events import DoneEvent
from edgespec.errors import ConfigError
from edgespec.options import check_max_tokens

if TYPE_CHECKING:
    from edgespec.api import Speculator


def read_stdin() -> str | None:
    """Piped input as text; None when stdin is a terminal or absent."""
    stream = sys.stdin
    if stream is None or stream.closed or _is_tty(stream):
        return None
    data = stream.buffer.read()
    if b"\x00" in data:
        raise ConfigError("stdin holds binary data (NUL bytes); pipe text into edgespec run")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"stdin is not UTF-8 text (bad byte at offset {exc.start})") from exc


def build_prompt(prompt: str | None) -> str:
    """`cat f | edgespec run "do X"` puts the instruction and the file in the prompt;
    `edgespec run -` takes the prompt from stdin alone."""
    if prompt == "-":
        piped = read_stdin()
        if piped is None:
            raise ConfigError("`-` reads the prompt from stdin, but stdin is a terminal")
        text = piped
    else:
        piped = read_stdin()
        if prompt is None:
            if piped is None:
                raise ConfigError('no prompt given: edgespec run "PROMPT" (or pipe text into it)')
            text = piped
        else:
            text = f"{prompt}\n\n{piped}" if piped and piped.strip() else prompt
    if not text.strip():
        raise ConfigError("the prompt is empty")
    return text


def run(
    prompt: Annotated[
        str | None,
        typer.Argument(help="The prompt; `-` reads it from stdin. Piped stdin is appended."),
    ] = None,
    pair: Pair = None,
    target: Target = None,
    draft: Draft = None,
    drafter: Annotated[
        str, typer.Option("--drafter", "-d", help=f"One of {', '.join(DRAFTERS)}.")
    ] = "auto",
    draft_tokens: Annotated[
        int | None,
        typer.Option("--draft-tokens", "-k", help="Draft length K (default per drafter)."),
    ] = None,
    temperature: Annotated[float, typer.Option("--temperature", "--temp", help="0: greedy.")] = 0.0,
    top_k: Annotated[int, typer.Option("--top-k", help="0: off.")] = 0,
    top_p: Annotated[float, typer.Option("--top-p", help="1: off.")] = 1.0,
    min_p: Annotated[float, typer.Option("--min-p", help="0: off.")] = 0.0,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for sampling.")] = None,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")
    ] = 512,
    stop: Annotated[
        list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")
    ] = None,
    system: Annotated[str | None, typer.Option("--system", help="System prompt.")] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="No chat template: the prompt as it is.")
    ] = False,
    threads: Threads = None,
    ctx_size: CtxSize = None,
    gpu_layers: GpuLayers = None,
    offline: Offline = False,
    recalibrate: Annotated[
        bool, typer.Option("--recalibrate", help="Measure this device again (auto drafter).")
    ] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print statistics on stderr.")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="JSON lines of events on stdout.")
    ] = False,
    show_draft: Annotated[
        bool, typer.Option("--show-draft", help="Colour tokens that came from the draft.")
    ] = False,
) -> None:
    """Generate text with speculative decoding; the text streams to stdout."""
    # Everything that can be wrong with the options is refused before a model is loaded.
    sampling = SamplingParams(temperature, top_k, top_p, min_p, seed)
    options = DecodeOptions(
        pair=pair,
        target=target,
        draft=draft,
        drafter=drafter,
        k=draft_tokens,
        n_ctx=ctx_size,
        n_threads=threads,
        n_gpu_layers=gpu_layers,
        offline=offline,
        recalibrate=recalibrate,
    ).checked()
    check_max_tokens(max_tokens)
    interactive = prompt is None and _is_tty(sys.stdin) and _is_tty(sys.stdout)
    text = "" if interactive else build_prompt(prompt)

    spec = loading.load(options)
    assert spec.plan is not None
    k = spec.plan.k
    if interactive:
        from edgespec.chat import Conversation
        from edgespec.cli.chat_repl import ChatRepl

        conversation = Conversation(spec, system, max_tokens, drafter, draft_tokens, sampling)
        header = (
            f"edgespec chat · {spec.plan.target.name}"
            + (f" + {spec.plan.draft.name}" if spec.plan.draft else "")
            + f" · {drafter_label(spec, drafter, k)} · context {spec.target.n_ctx} · /help"
        )
        raise typer.Exit(ChatRepl(spec, conversation, show_draft, stats, header).run())
    render = JsonRenderer(sys.stdout) if json_out else TextRenderer(sys.stdout, show_draft)
    done: DoneEvent | None = None
    events = spec.stream(
        text,
        drafter=drafter,
        k=k,
        max_tokens=max_tokens,
        stop=stop or (),
        sampling=sampling,
        system=system,
        raw=raw,
    )
    try:
        for event in events:
            render(event)
            if isinstance(event, DoneEvent):
                done = event
        render.close()
    except KeyboardInterrupt:
        events.close()  # type: ignore[attr-defined]
        render.close()
        err.print("interrupted", style="dim")
        raise typer.Exit(130) from None
    except BrokenPipeError:
        # `edgespec run ... | head -1`: the reader is gone; leave quietly.
        events.close()  # type: ignore[attr-defined]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None
    if stats:
        final = done.stats if done else spec.session.last_stats
        assert final is not None
        err.print(
            stats_line(
                final, done.finish_reason if done else None, drafter_label(spec, drafter, k)
            ),
            style="dim",
            markup=False,
        )


def _is_tty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def drafter_label(spec: Speculator, drafter: str, k: int) -> str:
    plan, policy = spec.plan, spec.auto_policy
    if drafter != "auto" or policy is None or plan is None or plan.calibration is None:
        return f"drafter {drafter}, K {k}"
    state = policy.state
    use_model = plan.choice is not None and plan.choice.use_model
    using = "n-gram + draft model" if use_model else "n-gram lookup only"
    how = "cached" if plan.calibration_cached else f"{plan.calibration.seconds:.1f} s"
    return (
        f"drafter auto ({using}; K chosen per round up to {k}; {state.switches} drafter "
        f"switches, {state.probes} probes; calibration {how})"
    )
