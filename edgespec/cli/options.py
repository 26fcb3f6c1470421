"""Options shared by several commands (one definition, one help text), and the groups of them
that commands declare as one parameter each: the model options every command that loads models
takes (`ModelOptions`), the sampling options (`SamplingOptions`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from edgespec.api import DRAFTERS, DecodeOptions, SamplingParams

KEYWORD = inspect.Parameter.KEYWORD_ONLY

Pair = Annotated[
    str | None, typer.Option("--pair", "-p", help="Registry pair (see `edgespec models`).")
]
# `edgespec serve PAIR`, `edgespec plan PAIR`: the pair as the command's argument.
PairArgument = Annotated[
    str | None, typer.Argument(help="Registry pair (default: the default pair).")
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        "-m",
        help="Target model: registry name, path to a .gguf, ollama:NAME:TAG, hf:OWNER/REPO "
        "(or hf:OWNER/REPO/FILE) or lmstudio:PUBLISHER/MODEL (see `edgespec models`).",
    ),
]
Draft = Annotated[
    str | None,
    typer.Option(
        "--draft",
        "-md",
        help="Draft model, named as --target is; none: no draft model. A command that loads "
        "models gives --target alone a draft found on this machine.",
    ),
]
Yes = Annotated[
    bool,
    typer.Option("--yes", help="Pull the registry's draft for a --target alone without asking."),
]
Offline = Annotated[bool, typer.Option("--offline", help="Use only models already on disk.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
Threads = Annotated[
    int | None,
    typer.Option("--threads", "-t", min=1, help="CPU threads (default: performance cores)."),
]
CtxSize = Annotated[
    int | None,
    typer.Option(
        "--ctx-size", "-c", help="Context size in tokens (default 4096, less if RAM is short)."
    ),
]
GpuLayers = Annotated[
    int | None,
    typer.Option(
        "--gpu-layers",
        "-ngl",
        help=(
            "The target's layers to offload when llama.cpp has Metal/CUDA (default: as many as "
            "the GPU's memory holds; -1: all; 0: none, for the draft too). The draft gets what "
            "the GPU has left."
        ),
    ),
]
Rpc = Annotated[
    str | None,
    typer.Option(
        "--rpc",
        metavar="HOST:PORT[@MEM][,...]",
        help="llama.cpp RPC servers (ggml-rpc-server) that compute the target; the draft stays "
        "here. @MEM (e.g. @1.5G): what a server's host has free, where it cannot say (its CPU).",
    ),
]
Memory = Annotated[
    str | None,
    typer.Option(
        "--memory",
        metavar="DIR",
        help="Keep this project's generations in DIR (this disk only) and draft from them (auto).",
    ),
]
Parallel = Annotated[
    int | None,
    typer.Option(
        "--parallel",
        min=1,
        help="Requests generated at once, their target passes shared (default: as many as "
        "the plan fits in memory, up to 4; each slot has its own KV cache of --ctx-size).",
    ),
]
DrafterName = Annotated[
    str,
    typer.Option(
        "--drafter",
        "-d",
        help=f"One of {', '.join(DRAFTERS)}; auto's features switch off one by one: "
        "auto:hints=0, trees=0, resume=0, edits=0, model=0, ramp=0, proof=0, budget=0 "
        "(combined: auto:hints=0:trees=0).",
    ),
]
DraftTokens = Annotated[
    int | None,
    typer.Option("--draft-tokens", "-k", help="Draft length K (default per drafter)."),
]
Temperature = Annotated[float, typer.Option("--temperature", "--temp", help="0: greedy.")]
TopK = Annotated[int, typer.Option("--top-k", help="0: off.")]
TopP = Annotated[float, typer.Option("--top-p", help="1: off.")]
MinP = Annotated[float, typer.Option("--min-p", help="0: off.")]
Seed = Annotated[int | None, typer.Option("--seed", help="Seed for sampling.")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")]
Stop = Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")]
System = Annotated[str | None, typer.Option("--system", help="System prompt.")]
Raw = Annotated[bool, typer.Option("--raw", help="No chat template: the prompt as it is.")]
Recalibrate = Annotated[
    bool, typer.Option("--recalibrate", help="Measure this device again (auto drafter).")
]
Stats = Annotated[bool, typer.Option("--stats", help="Print statistics on stderr.")]
JsonSchema = Annotated[
    str | None,
    typer.Option(
        "--json-schema",
        help="The answer is JSON valid against this JSON Schema: a file, or the schema itself.",
    ),
]
GrammarFile = Annotated[
    Path | None,
    typer.Option("--grammar", help="The answer follows this GBNF grammar file (rule `root`)."),
]
JsonObject = Annotated[
    bool, typer.Option("--json-object", help="The answer is a JSON object (any).")
]
JsonLines = Annotated[bool, typer.Option("--json", help="JSON lines of events on stdout.")]
Logprobs = Annotated[
    int | None,
    typer.Option(
        "--logprobs",
        min=0,
        max=20,
        help="With --json: each token's logprob and its N likeliest alternatives (0-20).",
    ),
]
RawControl = Annotated[
    bool,
    typer.Option(
        "--raw-control",
        help="Write control characters in the answer to a terminal as they are (escape "
        "sequences act); by default a terminal shows them as `cat -v` does.",
    ),
]
ShowDraft = Annotated[
    bool, typer.Option("--show-draft", help="Colour tokens that came from the draft.")
]


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """Which models, and where and how they compute: what every command that loads models
    takes (run, infill, serve, bench, plan), declared as one parameter (`with_shared_options`)."""

    pair: Pair = None
    target: Target = None
    draft: Draft = None
    threads: Threads = None
    ctx_size: CtxSize = None
    gpu_layers: GpuLayers = None
    rpc: Rpc = None
    offline: Offline = False
    yes: Yes = False

    def decode(
        self,
        *,
        memory: str | None = None,
        recalibrate: bool = False,
        calibrate_later: bool = False,
        parallel: int | None = 1,
    ) -> DecodeOptions:
        """The planner's options: these, with what the command asks of the loading."""
        return DecodeOptions(
            pair=self.pair,
            target=self.target,
            draft=self.draft,
            n_ctx=self.ctx_size,
            n_threads=self.threads,
            n_gpu_layers=self.gpu_layers,
            offline=self.offline,
            recalibrate=recalibrate,
            calibrate_later=calibrate_later,
            rpc=self.rpc,
            memory=memory,
            parallel=parallel,
            yes=self.yes,
        )


@dataclass(frozen=True, kw_only=True)
class SamplingOptions:
    """How tokens are drawn (run's and infill's flags), declared as one parameter too."""

    temperature: Temperature = 0.0
    top_k: TopK = 0
    top_p: TopP = 1.0
    min_p: MinP = 0.0
    seed: Seed = None

    def params(self) -> SamplingParams:
        """The engine's sampling parameters (checked: a bad value is refused here)."""
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            seed=self.seed,
        )


# What a command's group parameter defaults to (a Python call that gives none).
DEFAULT_MODELS = ModelOptions()
DEFAULT_SAMPLING = SamplingOptions()
# A command's parameter of this name holds these options (`with_shared_options`).
GROUPS: dict[str, type[ModelOptions] | type[SamplingOptions]] = {
    "models": ModelOptions,
    "sampling": SamplingOptions,
}

Command = TypeVar("Command", bound=Callable[..., Any])


def _expanded(group: type, pair: Any) -> list[inspect.Parameter]:
    """A group's options as Typer reads a command's parameters (by keyword: any order holds)."""
    hints = get_type_hints(group, include_extras=True)
    if "pair" in hints:
        hints["pair"] = pair
    default = group()
    return [
        inspect.Parameter(
            f.name, KEYWORD, default=getattr(default, f.name), annotation=hints[f.name]
        )
        for f in fields(group)
    ]


def with_shared_options(pair: Any = Pair) -> Callable[[Command], Command]:
    """A command's `models: ModelOptions` and `sampling: SamplingOptions` parameters shown to
    Typer as the options they hold, in their place (`pair`: the annotation of `pair`, for a
    command that takes it as an argument); the command is called with them gathered."""

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        groups = {name: cls for name, cls in GROUPS.items() if name in signature.parameters}
        expanded = {name: _expanded(cls, pair) for name, cls in groups.items()}
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            params += expanded.get(param.name, [param.replace(kind=KEYWORD)])

        @functools.wraps(command)
        def with_groups(**values: Any) -> Any:
            for name, cls in groups.items():
                values[name] = cls(**{p.name: values.pop(p.name) for p in expanded[name]})
            return command(**values)

        with_groups.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        with_groups.__annotations__ = {p.name: p.annotation for p in params}
        return with_groups  # type: ignore[return-value]

    return decorate
