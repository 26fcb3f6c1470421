"""`edgespec doctor`: will this installation work here, and what to do if not."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from edgespec.cli.console import out
from edgespec.cli.options import GpuLayers, Json

_MARK = {"pass": ("✓", "green"), "fail": ("✗", "bold red"), "skip": ("–", "yellow")}


def doctor(
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="GGUF file for the test decode (default: the smallest "
            "model of the default pair on disk).",
        ),
    ] = None,
    gpu_layers: GpuLayers = None,
    json_out: Json = False,
) -> None:
    """Check the llama.cpp build, this CPU, the models and the network; exit 1 if any fails.
    The test decode puts as many layers on the GPU as a run with the same --gpu-layers."""
    from edgespec.doctor import diagnose

    report = diagnose(model, gpu_layers)
    if json_out:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        width = max(len(c.name) for c in report.checks)
        for check in report.checks:
            mark, style = _MARK[check.status]
            line = Text(f"{mark} ", style=style)
            line.append(f"{check.name:<{width}}  ", style="bold")
            line.append(check.detail)
            out.print(line, soft_wrap=True)
            if check.fix and check.status != "pass":
                out.print(Text(f"  {' ' * width}  fix: {check.fix}", style="dim"), soft_wrap=True)
        failed = [c.name for c in report.checks if c.status == "fail"]
        out.print(
            Text("all checks passed", style="green")
            if not failed
            else Text(f"{len(failed)} failed: {', '.join(failed)}", style="bold red")
        )
    if not report.ok:
        raise typer.Exit(1)
