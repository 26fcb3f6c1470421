"""Calibrate later: a one-shot run answers from costs guessed from the files (a plan made with
`calibrate_later`, make.py) and measures this device after the answer, for later runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from edgespec.models import files
from edgespec.planner.calibrate import Calibration
from edgespec.planner.load import load_model
from edgespec.planner.make import measure_loaded
from edgespec.planner.plan import DecodePlan
from edgespec.planner.resources import Resources


def measure(
    plan: DecodePlan | None,
    target: Any,
    draft: Any | None,
    progress: files.Progress | None = None,
    before: Callable[[], None] | None = None,
) -> DecodePlan | None:
    """Where `plan`'s calibration is a guess: `before()`, then this device measured with the
    loaded models and cached for later runs; the plan with it. None when nothing is pending."""
    if plan is None or plan.calibration is None or plan.calibration.measured:
        return None
    if before is not None:
        before()
    (progress or files.Silent()).note(
        "measuring this device for the auto drafter (once; later runs start from it)"
    )
    cal = _measured(target, draft, plan.calibration, plan.resources)
    return replace(plan, calibration=cal)


def _measured(
    target: Any, draft: Any | None, calibration: Calibration, resources: Resources
) -> Calibration:
    """The measurement the guess's key names (where it goes, which draft), the draft file
    loaded for it where the plan did not load it."""
    where = calibration.key
    draft_path = where.get("draft")
    borrowed = None
    if draft_path is not None and draft is None:
        borrowed = load_model(draft_path, resources)
    try:
        return measure_loaded(
            target, None if draft_path is None else (borrowed or draft), where["key"], resources
        )
    finally:
        if borrowed is not None:
            borrowed.close()
