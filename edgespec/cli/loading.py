"""How every command gets its plan and its models: `make_plan`, then `Speculator.load(plan)`,
with download bars and notes on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer

from edgespec.api import DecodeOptions, DecodePlan, Drafting, Speculator, make_plan
from edgespec.cli.console import err, is_tty
from edgespec.cli.progress import DownloadBars


def plan_only(options: DecodeOptions, drafting: Drafting) -> DecodePlan:
    with DownloadBars(err) as bars:
        return make_plan(options, drafting, progress=bars, confirm=ask)


def load(options: DecodeOptions, drafting: Drafting) -> Speculator:
    with DownloadBars(err) as bars:
        plan = make_plan(options, drafting, progress=bars, confirm=ask)
        return Speculator.load(plan=plan, progress=bars)


def ask(question: str) -> bool:
    """The user's yes at a terminal (stdin and stderr both one); no where there is none."""
    if not (is_tty(sys.stdin) and is_tty(sys.stderr)):
        return False
    return typer.confirm(question, default=False, err=True)


def calibrate(spec: Speculator, before: Callable[[], None]) -> None:
    """Measure the device now where `auto` ran on guessed costs, after `before()` (a note on
    stderr)."""
    with DownloadBars(err) as bars:
        spec.calibrate_pending(progress=bars, before=before)
