"""tau(n) at every size the policy may choose (edgespec.planner.calibrate.TAU_POINTS), not only
the core sizes the calibration measures on a device where the others do not fit its budget:
four interleaved passes, twice, with the target of the default pair. The record behind
benchmarks/HISTORY.md (2026-12-01, 2-core AMD EPYC, AVX-512).

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
        m = C._batch_costs(
            spec.target, ctx[: C.CONTEXT_TOKENS], list(C.TAU_POINTS), 2000, (4, 4), None
        )
        t1 = m.seconds[1]
        tau = {n: round(v / t1, 2) for n, v in m.seconds.items()}
        print(
            json.dumps({"t1_ms": round(t1 * 1000, 2), "spread": round(m.spread, 3), "tau": tau}),
            flush=True,
        )


if __name__ == "__main__":
    main()
