"""`auto` replayed on recorded heavy-pair outputs with other `PolicyConfig` values, and the
fixed draft-model configurations beside it, in target steps (edgespec/auto/replay.py's
recorded target and draft: no timing noise).

    PYTHONPATH=. python benchmarks/heavy/replay/variants.py OUTPUTS CALIBRATION [c=0.145] \\
        base model_round_weight=0.15 model_round_weight=0.05,probe_budget=0.2

OUTPUTS: `scripts/replay_policy.py --collect --collect-draft --target F16 --suite ...`;
CALIBRATION: `edgespec plan --json`'s cache file for the pair; `c=`: a draft step in target
steps when the outputs record another draft than the calibration's. Each argument after them is
a variant (`base`: the defaults), replayed beside fixed draft-simple settings; speeds overall
and for the code and the prose outputs. `auto` drafts from lookups too, as it does live; the
fixed settings draft from the model only. The draft's batch costs are the ones measured with the F16
pair on the 2-core AVX2 EPYC (a batch of 2 costs 1.62 draft steps: the draft is compute-bound
there), not the calibration's coarser ones.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from carry import by_kind, geo, kinds_of  # beside this script

from edgespec.auto.config import AUTO, AutoConfig
from edgespec.auto.prior import CostModel
from edgespec.auto.replay import Replay, recorded_run
from edgespec.engine.drafters import ModelDrafter
from edgespec.engine.events import RoundEvent
from edgespec.engine.generate import FixedK, GenerationConfig, Session

# llama.cpp's draft-simple at the settings scripts/compare_llamacpp.py runs (n-max 3, 5, 8, 16
# by p-min 0 and 0.75: its DRAFT_N_MAX and DRAFT_P_MIN), then two it does not that earlier
# sections replayed: p-min 0.5 with K 5, p-min 0.75 with K 4
FIXED = (
    *((p_min, k) for k in (3, 5, 8, 16) for p_min in (0.0, 0.75)),
    (0.5, 5),
    (0.75, 4),
)
DRAFT_TAU = {1: 1.0, 2: 1.62, 3: 2.11, 4: 2.28, 5: 2.59, 8: 3.73, 16: 5.52, 32: 9.0}


def replay(
    run: dict[str, Any], tau: dict[int, float], c: float, how: AutoConfig | tuple[float, int]
) -> float:
    """Tokens per target step of one output: `auto` with config `how`, or a fixed model
    drafter `how` = (p_min, K)."""
    if isinstance(how, AutoConfig):
        return Replay(run, tau, c=c, draft_tau=DRAFT_TAU, config=how).speed()
    recorded = recorded_run(run, DRAFT_TAU, tree_width=1)
    prompt, out, target, draft = recorded.prompt, recorded.out, recorded.target, recorded.draft
    costs = CostModel(tau, c)
    drafter, policy = ModelDrafter(draft, p_min=how[0]), FixedK(how[1])
    events = Session(target).generate(
        prompt, drafter, GenerationConfig(max_tokens=len(out)), policy
    )
    steps, drafting = 0.0, 0.0
    for event in events:
        if isinstance(event, RoundEvent):
            steps += costs.tau(event.drafted + 1) + c * (draft.steps - drafting)
            drafting = draft.steps
    return len(out) / steps


def variant(spec: str) -> AutoConfig:
    pairs = [item.split("=") for item in spec.split(",")] if spec != "base" else []
    fields = {k: type(getattr(AUTO.policy, k))(v) for k, v in pairs}
    return dataclasses.replace(AUTO, policy=dataclasses.replace(AUTO.policy, **fields))


def main() -> None:
    runs = json.loads(Path(sys.argv[1]).read_text())
    cal = json.loads(Path(sys.argv[2]).read_text())
    tau = {int(n): v for n, v in cal["tau"].items()}
    args = sys.argv[3:]
    # c=VALUE: a draft step in target steps, for a draft other than the calibration's
    given = [a for a in args if a.startswith("c=")]
    c = float(given[-1][2:]) if given else cal["draft_step_s"] / cal["target_step_s"]
    kinds = kinds_of(runs)
    options: list[tuple[str, AutoConfig | tuple[float, int]]] = [
        (s, variant(s)) for s in args if not s.startswith("c=")
    ]
    options += [(f"model p-min {p} K {k}", (p, k)) for p, k in FIXED]
    for name, how in options:
        speeds = [replay(run, tau, c, how) for run in runs]
        print(
            f"{name:40s} {geo(speeds):.3f}x plain ({by_kind(speeds, kinds)})  "
            + " ".join(f"{s:.2f}" for s in speeds)
        )


if __name__ == "__main__":
    main()
