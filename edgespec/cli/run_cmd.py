"""`edgespec run`: generate from a prompt (argument, stdin or both), streaming to stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from edgespec.api import Conversation, DoneEvent, Event, check_max_tokens
from edgespec.cli import loading
from edgespec.cli.console import err, is_tty
from edgespec.cli.options import (
    DEFAULT_MODELS,
    DEFAULT_SAMPLING,
    DrafterName,
    DraftTokens,
    GrammarFile,
    JsonLines,
    JsonObject,
    JsonSchema,
    Logprobs,
    MaxTokens,
    Memory,
    ModelOptions,
    Raw,
    RawControl,
    Recalibrate,
    SamplingOptions,
    ShowDraft,
    Stats,
    Stop,
    System,
    with_shared_options,
)
from edgespec.cli.render import JsonRenderer, TextRenderer, stats_line
from edgespec.errors import ConfigError
from edgespec.options import Drafting
from edgespec.planner.resources import DEFAULT_CTX
from edgespec.text.bounded_input import read_file, read_text
from edgespec.text.grammar import Grammar, GrammarError, unfinished

if TYPE_CHECKING:
    from edgespec.api import Speculator


# The most characters one token holds, with room for other vocabularies than the default
# pair's (docs/tuning.md, Input read under a cap): stdin past this many per token of the
# context cannot fit it.
CHARS_PER_TOKEN = 256


def stdin_limit(ctx_size: int | None) -> int:
    """The most characters stdin may hold: what the context could take at most."""
    return max(ctx_size or 0, DEFAULT_CTX) * CHARS_PER_TOKEN


def _piped() -> BinaryIO | None:
    """Stdin's bytes where something is piped into it; None when it is a terminal or absent."""
    stream = sys.stdin
    return None if stream is None or stream.closed or is_tty(stream) else stream.buffer


def read_stdin(limit: int) -> str | None:
    """Piped input as text, at most `limit` characters; None when nothing is piped."""
    piped = _piped()
    return None if piped is None else read_text(piped, limit, "stdin", larger_context(limit))


def larger_context(limit: int) -> str:
    """How to allow more than `limit` characters of input, for its error."""
    return (
        f": more than a {limit // CHARS_PER_TOKEN:,}-token context can hold; a larger "
        f"--ctx-size allows {CHARS_PER_TOKEN} characters a token"
    )


def build_prompt(prompt: str | None, limit: int) -> str:
    """`cat f | edgespec run "do X"` puts the instruction and the file in the prompt;
    `edgespec run -` takes the prompt from stdin alone (at most `limit` characters of it)."""
    piped = read_stdin(limit)
    if prompt == "-":
        if piped is None:
            raise ConfigError("`-` reads the prompt from stdin, but stdin is a terminal")
        text = piped
    elif prompt is None:
        if piped is None:
            raise ConfigError('no prompt given: edgespec run "PROMPT" (or pipe text into it)')
        text = piped
    else:
        text = f"{prompt}\n\n{piped}" if piped and piped.strip() else prompt
    if not text.strip():
        raise ConfigError("the prompt is empty")
    return text


PredictionFile = Annotated[
    str | None,
    typer.Option(
        "--prediction",
        help="A file the answer will mostly repeat (the file being edited; `-`: stdin), "
        "drafted from: OpenAI's predicted outputs.",
    ),
]


def read_prediction(prediction: str | None, limit: int) -> str | None:
    """The predicted output's text, from a file or (`-`) stdin, at most `limit` characters."""
    if prediction is None:
        return None
    if prediction != "-":
        return read_file(Path(prediction), limit, f"--prediction {prediction}")
    piped = _piped()
    if piped is None:
        raise ConfigError(
            "`--prediction -` reads the prediction from stdin, but stdin is a terminal"
        )
    return read_text(piped, limit, "--prediction -", larger_context(limit))


@with_shared_options()
def run(
    prompt: Annotated[
        str | None,
        typer.Argument(help="The prompt; `-` reads it from stdin. Piped stdin is appended."),
    ] = None,
    models: ModelOptions = DEFAULT_MODELS,
    drafter: DrafterName = "auto",
    draft_tokens: DraftTokens = None,
    sampling: SamplingOptions = DEFAULT_SAMPLING,
    max_tokens: MaxTokens = 512,
    stop: Stop = None,
    system: System = None,
    raw: Raw = False,
    memory: Memory = None,
    recalibrate: Recalibrate = False,
    stats: Stats = False,
    json_out: JsonLines = False,
    logprobs: Logprobs = None,
    show_draft: ShowDraft = False,
    raw_control: RawControl = False,
    json_schema: JsonSchema = None,
    grammar_file: GrammarFile = None,
    json_object: JsonObject = False,
    prediction: PredictionFile = None,
) -> None:
    """Generate text with speculative decoding; the text streams to stdout."""
    # Everything that can be wrong with the options is refused before a model is loaded.
    params = sampling.params()
    grammar = grammar_of(json_schema, grammar_file, json_object)
    interactive = prompt is None and is_tty(sys.stdin) and is_tty(sys.stdout)
    # A one-shot run measures the device after its answer, a chat before its first.
    options = models.decode(memory=memory, recalibrate=recalibrate, calibrate_later=not interactive)
    drafting = Drafting.of(drafter, draft_tokens)
    _check(max_tokens, logprobs, json_out)
    text, predicted = _inputs(prompt, prediction, interactive, stdin_limit(models.ctx_size))
    spec = loading.load(options, drafting)
    if interactive:
        # A grammar given on the command line holds for every answer.
        chat = Conversation(
            spec, system, max_tokens, drafter, draft_tokens, params, grammar=grammar
        )
        raise typer.Exit(_chat(spec, chat, drafting, show_draft, stats, raw_control))
    events = spec.stream(
        text,
        drafter=drafting.drafter,
        k=drafting.k,
        max_tokens=max_tokens,
        stop=stop or (),
        sampling=params,
        system=system,
        raw=raw,
        instruction=_instruction(prompt),
        grammar=grammar,
        logprobs=logprobs,
        prediction=predicted,
    )
    done = _render(events, _renderer(json_out, show_draft, raw_control))
    label = drafter_label(spec, drafting) if stats else None
    _after_answer(spec, done, label, max_tokens)


def _check(max_tokens: int, logprobs: int | None, json_out: bool) -> None:
    check_max_tokens(max_tokens)
    if logprobs is not None and not json_out:
        raise ConfigError("--logprobs is written in --json's lines: add --json")


def _inputs(
    prompt: str | None, prediction: str | None, interactive: bool, limit: int
) -> tuple[str, str | None]:
    """The prompt's text ("" for a chat) and the prediction's (None: none), read before a model
    loads: stdin holds one of them at most, and a chat takes no prediction."""
    if prediction is not None and (interactive or (prediction == "-" and prompt in (None, "-"))):
        raise ConfigError("--prediction is for one answer: give the prompt as an argument")
    predicted = read_prediction(prediction, limit)
    return ("" if interactive else build_prompt(prompt, limit)), predicted


def _instruction(prompt: str | None) -> str | None:
    """What the user asks for: the prompt argument. A piped file is not the instruction: what
    it says is not what the user asks for."""
    return prompt if prompt not in (None, "-") else None


def _renderer(json_out: bool, show_draft: bool, raw_control: bool) -> JsonRenderer | TextRenderer:
    return (
        JsonRenderer(sys.stdout) if json_out else TextRenderer(sys.stdout, show_draft, raw_control)
    )


def _after_answer(
    spec: Speculator, done: DoneEvent | None, stats_label: str | None, max_tokens: int
) -> None:
    """Statistics, the device measured where that is still to do, and an answer that stopped
    inside its grammar refused (its text is out, but it is not what was asked for)."""
    if stats_label is not None:
        _print_stats(spec, done, stats_label)
    loading.calibrate(spec, before=_end_stdout)  # a pipeline's reader has the answer first
    failure = done and unfinished(done.incomplete, done.finish_reason, max_tokens)
    if failure:
        raise GrammarError(failure)


def grammar_of(
    json_schema: str | None, grammar_file: Path | None, json_object: bool
) -> Grammar | None:
    """The grammar the options ask the answer to follow (at most one of them)."""
    asked = [json_schema is not None, grammar_file is not None, json_object]
    if sum(asked) > 1:
        raise ConfigError("--json-schema, --grammar and --json-object exclude each other")
    if json_schema is not None:
        return Grammar.from_schema_option(json_schema)
    if grammar_file is not None:
        return Grammar.from_gbnf_file(grammar_file)
    return Grammar.json_object() if json_object else None


def _print_stats(spec: Speculator, done: DoneEvent | None, label: str) -> None:
    """The statistics line on stderr (the session's last figures if no done event came)."""
    final = done.stats if done else spec.session.last_stats
    assert final is not None
    reason = done.finish_reason if done else None
    err.print(stats_line(final, reason, label), style="dim", markup=False)


def _chat(
    spec: Speculator,
    conversation: Conversation,
    drafting: Drafting,
    show_draft: bool,
    stats: bool,
    raw_control: bool,
) -> int:
    """A terminal on both ends and no prompt: a conversation, not one generation."""
    from edgespec.cli.chat_repl import ChatRepl

    header = _chat_header(spec, drafting)
    repl = ChatRepl(spec, conversation, show_draft, stats, header, raw_control=raw_control)
    return repl.run()


def _chat_header(spec: Speculator, drafting: Drafting) -> str:
    assert spec.plan is not None
    plan = spec.plan
    models = plan.target.name + (f" + {plan.draft.name}" if plan.draft else "")
    label = drafter_label(spec, drafting)
    return f"edgespec chat · {models} · {label} · context {spec.target.n_ctx} · /help"


def _render(
    events: Generator[Event, None, None], render: JsonRenderer | TextRenderer
) -> DoneEvent | None:
    """Stream the events to stdout; Ctrl-C exits 130 with the text kept, a closed pipe 0."""
    done: DoneEvent | None = None
    try:
        for event in events:
            render(event)
            if isinstance(event, DoneEvent):
                done = event
        render.close()
    except KeyboardInterrupt:
        events.close()
        render.close()
        err.print("interrupted", style="dim")
        raise typer.Exit(130) from None
    except BrokenPipeError:
        # `edgespec run ... | head -1`: the reader is gone; leave quietly.
        events.close()
        _stdout_to_devnull()
        raise typer.Exit(0) from None
    return done


def _end_stdout() -> None:
    """Flush and close stdout, so that a reader sees the end of the answer while this process
    still works (the same file descriptor then writes to /dev/null)."""
    sys.stdout.flush()
    _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def drafter_label(spec: Speculator, drafting: Drafting) -> str:
    plan, learned = spec.plan, spec.auto_learned
    asked, k = drafting.drafter, drafting.k
    if not drafting.auto or learned is None or plan is None or plan.calibration is None:
        return f"drafter {asked.label}, K {k}"
    state = learned.state
    use_model = plan.choice is not None and plan.choice.use_model and asked.switches.model
    using = "n-gram + draft model" if use_model else "n-gram lookup only"
    how = (
        "cached"
        if plan.calibration_cached
        else f"{plan.calibration.seconds:.1f} s"
        if plan.calibration.measured
        else "guessed from the files, measured after this answer"
    )
    return (
        f"drafter {asked.label} ({using}; K chosen per round up to {k}; {state.switches} drafter "
        f"switches, {state.probes} probes; calibration {how})"
    )
