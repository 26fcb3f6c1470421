"""`edgespec bench`: is speculation faster on this machine, for these prompts, and lossless?"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from edgespec.api import NEEDS_DRAFT_MODEL, DrafterKind, Drafting, SamplingParams
from edgespec.cli import loading
from edgespec.cli.console import err, print_tables
from edgespec.cli.options import (
    DEFAULT_MODELS,
    ModelOptions,
    Seed,
    Temperature,
    TopP,
    with_shared_options,
)
from edgespec.errors import ConfigError

if TYPE_CHECKING:
    from edgespec.api import Speculator
    from edgespec.bench import BenchConfig, BenchPrompt, BenchResult

DEFAULT_CONFIGS = "none,auto,model:k=4,ngram:k=8,hybrid"


Suites = Annotated[
    list[str] | None,
    typer.Option("--suite", "-s", help="Built-in suite or JSONL file (repeatable; default: all)."),
]
Configs = Annotated[
    str,
    typer.Option(
        "--configs",
        help="Comma-separated configurations: a drafter as --drafter takes it (auto:hints=0), "
        "with k=N (K) and, for auto, w=N (tree width): none,auto,auto:trees=0,model:k=4.",
    ),
]
Repeats = Annotated[int, typer.Option("--repeats", "-r", help="Runs per prompt and configuration.")]
JsonFile = Annotated[
    Path | None, typer.Option("--json", help="Write all raw numbers to this file.")
]
MarkdownFile = Annotated[
    Path | None, typer.Option("--markdown", help="Write markdown tables to this file.")
]
PlotFile = Annotated[Path | None, typer.Option("--plot", help="Write a chart (PNG or SVG).")]
PromptTokens = Annotated[
    int,
    typer.Option(
        "--max-tokens", "-n", help="Most tokens per prompt; a suite's max_tokens can only lower it."
    ),
]


@with_shared_options()
def bench(
    models: ModelOptions = DEFAULT_MODELS,
    suite: Suites = None,
    configs: Configs = DEFAULT_CONFIGS,
    max_tokens: PromptTokens = 128,
    repeats: Repeats = 3,
    temperature: Temperature = 0.0,
    top_p: TopP = 1.0,
    seed: Seed = None,
    json_path: JsonFile = None,
    markdown_path: MarkdownFile = None,
    plot_path: PlotFile = None,
) -> None:
    """Benchmark drafter configurations against plain decoding, interleaved, in one process."""
    from edgespec.bench import BUILTIN, load_suite, parse_configs

    sampling = SamplingParams(temperature=temperature, top_p=top_p, seed=seed)
    parsed = parse_configs(configs)
    if max_tokens < 1 or repeats < 1:
        raise ConfigError("--max-tokens and --repeats must be >= 1")
    prompts = [p for name in (suite or list(BUILTIN)) for p in load_suite(name)]
    _check_outputs(json_path, markdown_path, plot_path)
    drafters = {c.drafter for c in parsed}
    # Plan for auto when it is benchmarked; keep the draft model when a config needs it.
    planned = DrafterKind.AUTO if DrafterKind.AUTO in drafters else DrafterKind.NONE
    keep_draft = bool(drafters & NEEDS_DRAFT_MODEL)
    spec = loading.load(models.decode(), Drafting.of(planned, keep_draft=keep_draft))
    _check_configs(spec, parsed)
    result, interrupted = _measure(spec, prompts, parsed, repeats, max_tokens, sampling)
    assert spec.plan is not None
    settings = {
        "pair": models.pair,
        "suites": suite or list(BUILTIN),
        "configs": [c.label for c in parsed],
        "max_tokens": max_tokens,
        "repeats": repeats,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        **_loaded(spec),
    }
    machine = spec.plan.resources.hardware.as_dict()
    spec.close()
    _report(result, settings, machine, json_path, markdown_path, plot_path)
    _exit_status(result, interrupted)


def _exit_status(result: BenchResult, interrupted: bool) -> None:
    """130 after Ctrl-C, 1 when a configuration was not lossless."""
    if interrupted:
        err.print("interrupted: the tables hold the runs measured so far", style="yellow")
        raise typer.Exit(130)
    checked = [
        m for p in result.prompts for ms in p.runs.values() for m in ms if m.valid is not None
    ]
    invalid = sum(not m.valid for m in checked)
    if invalid:  # reported, not a failure: a sampled answer may run out of --max-tokens
        err.print(
            f"structured output: {invalid} of {len(checked)} answers not valid against their "
            "schema (see the structured table)",
            style="yellow",
        )
    for p, label, d in result.failures:
        err.print(
            f"NOT LOSSLESS: {label} on {p.prompt.suite} #{p.prompt.index + 1} differs from "
            f"the baseline at token {d.position} (logit gap {d.logit_gap:.2f})",
            style="red",
        )
    if result.failures:
        sys.exit(1)


def _check_outputs(json_path: Path | None, markdown_path: Path | None, plot: Path | None) -> None:
    """Every output file can be written, before the first of many minutes of measuring."""
    from edgespec.bench import output

    for path, option in ((json_path, "--json"), (markdown_path, "--markdown"), (plot, "--plot")):
        if path is not None:
            output.check_writable(path, option)
    if plot is not None:
        output.check_plot_support(plot)


def _loaded(spec: Speculator) -> dict[str, Any]:
    """What the plan loaded, for the report."""
    assert spec.plan is not None
    return {
        "target": str(spec.plan.target),
        "draft": str(spec.plan.draft),
        "n_ctx": spec.plan.resources.n_ctx,
        "threads": spec.plan.resources.n_threads,
    }


def _check_configs(spec: Speculator, configs: list[BenchConfig]) -> None:
    """Refuse, before measuring anything, a configuration the loaded models cannot run."""
    assert spec.plan is not None
    for config in configs:
        if config.drafter not in spec.plan.drafters:
            spec.close()
            raise ConfigError(
                f"config {config.label} cannot run: the draft model is not loaded "
                f"({spec.plan.draft_reason})"
            )


def _measure(
    spec: Speculator,
    prompts: list[BenchPrompt],
    configs: list[BenchConfig],
    repeats: int,
    max_tokens: int,
    sampling: SamplingParams,
) -> tuple[BenchResult, bool]:
    """Run the benchmark under a progress bar; Ctrl-C keeps what was measured."""
    from edgespec.bench import BenchResult, run_bench

    result = BenchResult(configs)
    interrupted = False
    runs_per_prompt = repeats * len(configs)
    done_runs: dict[tuple[str, int], int] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("benchmark", total=len(prompts) * runs_per_prompt)

        def on_run(prompt: BenchPrompt, config: BenchConfig) -> None:
            where = f"{prompt.suite} #{prompt.index + 1}"
            progress.update(task, advance=1, description=f"{where} {config.label}")
            key = (prompt.suite, prompt.index)
            done_runs[key] = done_runs.get(key, 0) + 1
            if done_runs[key] == runs_per_prompt and not err.is_terminal:
                # No live bar in a log or a pipe: one line per finished prompt instead.
                err.print(f"{where}: done", markup=False)

        try:
            run_bench(
                spec,
                prompts,
                configs,
                repeats=repeats,
                max_tokens=max_tokens,
                sampling=sampling,
                on_run=on_run,
                result=result,
            )
        except KeyboardInterrupt:
            interrupted = True
    if result.prompts and not result.prompts[-1].runs:
        result.prompts.pop()
    return result, interrupted


def _report(
    result: BenchResult,
    settings: dict[str, Any],
    machine: dict[str, Any],
    json_path: Path | None,
    markdown_path: Path | None,
    plot_path: Path | None,
) -> None:
    from edgespec.api import versions
    from edgespec.bench import output

    print_tables(*output.terminal_tables(result))
    if json_path is not None:
        json_path.write_text(
            json.dumps(output.document(result, settings, machine, versions()), indent=2)
        )
    if markdown_path is not None:
        markdown_path.write_text(output.markdown(result, machine))
    if plot_path is not None and result.prompts:
        output.plot(result, plot_path)
