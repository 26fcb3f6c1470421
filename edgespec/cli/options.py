"""Options shared by several commands (one definition, one help text)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgespec.api import DRAFTERS

Pair = Annotated[
    str | None, typer.Option("--pair", "-p", help="Registry pair (see `edgespec models`).")
]
Target = Annotated[
    str | None,
    typer.Option("--target", "-m", help="Target model: registry name or path to a .gguf."),
]
Draft = Annotated[
    str | None,
    typer.Option("--draft", "-md", help="Draft model: registry name or path to a .gguf."),
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
        metavar="HOST:PORT[,...]",
        help="llama.cpp RPC servers (ggml-rpc-server) that compute the target; the draft stays "
        "here.",
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
