"""Options shared by several commands (one definition, one help text)."""

from __future__ import annotations

from typing import Annotated

import typer

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
    typer.Option("--threads", "-t", min=1, help="CPU threads (default: physical cores)."),
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
        help="Layers to offload when llama.cpp has Metal/CUDA (default: all; 0: none).",
    ),
]
