"""`edgespec pull`: download and verify a pair or single models."""

from __future__ import annotations

import sys

import typer

from edgespec.cli.console import err
from edgespec.cli.options import Draft, Offline, PairArgument, Target
from edgespec.cli.progress import DownloadBars
from edgespec.models import ModelRef, load_registry, model_ref
from edgespec.planner.load import quantize


def pull(
    pair: PairArgument = None,
    target: Target = None,
    draft: Draft = None,
    offline: Offline = False,
) -> None:
    """Download a pair's models (or single ones), verify them, and print their paths."""
    registry = load_registry()
    if target is None and draft is None:
        spec = registry.pair(pair)
        refs = [
            ModelRef(spec.target.name, spec=spec.target),
            ModelRef(spec.draft.name, spec=spec.draft),
        ]
    else:
        if pair is not None:
            raise typer.BadParameter("give a PAIR or --target/--draft, not both")
        refs = [model_ref(arg, registry) for arg in (target, draft) if arg is not None]
    with DownloadBars(err) as bars:
        for ref in refs:
            path = ref.locate(quantize=quantize, offline=offline, progress=bars)
            err.print(f"{ref.name}: ready", style="green", markup=False)
            sys.stdout.write(f"{path}\n")
