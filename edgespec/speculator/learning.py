"""What `auto` carries from one generation to the next, begun from costs or from a plan."""

from __future__ import annotations

from edgespec.auto.prior import CostModel
from edgespec.auto.start import Learned
from edgespec.models import files
from edgespec.planner.calibrate import Calibration
from edgespec.planner.decide import cost_model
from edgespec.planner.plan import DecodePlan
from edgespec.text.project_memory import ProjectMemory, Writer


def begin(
    costs: CostModel,
    *,
    step_s: float | None = None,
    draft_tau: dict[int, float] | None = None,
    memory: ProjectMemory | None = None,
) -> Learned:
    """`costs` in target steps, learned from the rounds where `step_s` is given."""
    return Learned.begin(
        costs,
        step_s=step_s,
        draft_tau=draft_tau,
        past=memory.load() if memory else (),
        # Written on a thread of its own: it is handed over within a pass's lock.
        on_done=Writer(memory).add if memory else None,
        recall=memory.load if memory else None,  # a client's own texts of earlier runs
    )


def planned(plan: DecodePlan, cal: Calibration) -> tuple[Learned, bool]:
    """What `auto` starts from under `plan`, and whether it may draft with the draft model."""
    use_model = plan.choice is not None and plan.choice.use_model
    memory = None
    if plan.memory is not None:
        memory = ProjectMemory(plan.memory, files.fingerprint(plan.target))
    learned = begin(
        cost_model(cal), step_s=cal.target_step_s, draft_tau=cal.draft_tau, memory=memory
    )
    return learned, use_model
