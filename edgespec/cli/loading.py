"""How every command gets its plan and its models: `make_plan`, then `Speculator.load(plan)`,
with download bars and notes on stderr."""

from __future__ import annotations

from collections.abc import Callable

from edgespec.api import DecodeOptions, DecodePlan, Speculator, make_plan
from edgespec.cli.console import err
from edgespec.cli.progress import DownloadBars


def plan_only(options: DecodeOptions) -> DecodePlan:
    with DownloadBars(err) as bars:
        return make_plan(options, progress=bars)


def load(options: DecodeOptions) -> Speculator:
    with DownloadBars(err) as bars:
        return Speculator.load(plan=make_plan(options, progress=bars), progress=bars)


def calibrate(spec: Speculator, before: Callable[[], None]) -> None:
    """Measure the device now where `auto` ran on guessed costs, after `before()` (a note on
    stderr)."""
    with DownloadBars(err) as bars:
        spec.calibrate_pending(progress=bars, before=before)
