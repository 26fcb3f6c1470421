"""tau(n) at every size the policy may choose (edgespec.planner.calibrate.TAU_POINTS), not only
the core sizes the calibration measures on a device where the others do not fit its budget:
four interleaved passes, twice, with the target of the default pair. The record behind
benchmarks/HISTORY.md (2026-12-01, 2-core AMD EPYC, AVX-512; then through the calibration's
private batch timer, now through `calibrate` with a budget that affords every size).

    .venv/bin/python benchmarks/zen5/tau_all.py > benchmarks/zen5/tau_all.txt
"""

import json

from edgespec.api import Speculator
from edgespec.planner import calibrate as C


def main() -> None:
    spec = Speculator.load(drafter="none", offline=True)
    ctx = spec.prompt_tokens(
        "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n" * 6
    )
    for _ in range(2):
        # A budget of 2000 steps affords every size (the calibration measures the sizes beyond
        # its core only where it affords them all); four passes each time.
        cal = C.calibrate(spec.target, None, ctx, budget_steps=2000, passes=(4, 4))
        tau = {n: round(v, 2) for n, v in cal.tau.items()}
        t1_ms = round(cal.target_step_s * 1000, 2)
        print(
            json.dumps({"t1_ms": t1_ms, "spread": round(cal.noise or 0.0, 3), "tau": tau}),
            flush=True,
        )


if __name__ == "__main__":
    main()
