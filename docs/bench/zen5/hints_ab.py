"""auto told and not told what the instruction asks to replace (hints.py: "rename `a` to `b`",
"from 8080 to 3000"), in one process, interleaved (the order reverses every repeat), against
plain decoding: per prompt the median tok/s of each, per suite the geometric means. On a prompt
whose instruction names no replacement the two auto runs are the same: their ratio is the
noise. The record behind docs/benchmarks.md (2026-12-01).

    PYTHONPATH=. python docs/bench/zen5/hints_ab.py REPEATS SUITE [SUITE ...]
"""

import math
import statistics
import sys

from edgespec.api import Speculator
from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent

spec = Speculator.load(drafter="auto", offline=True)
prompts = [p for name in sys.argv[2:] for p in load_suite(name)]
medians = []
for p in prompts:
    tokens = spec.prompt_tokens(p.prompt, system=p.system)
    told = {"none": "", "auto-untold": "", "auto-told": p.prompt}
    runs: dict[str, list[float]] = {c: [] for c in told}
    for r in range(int(sys.argv[1])):
        for c in list(told) if r % 2 == 0 else list(told)[::-1]:
            spec.reset()
            drafter = "none" if c == "none" else "auto"
            limit = p.max_tokens or 256
            for event in spec.stream(tokens, drafter=drafter, max_tokens=limit, instruction=told[c]):
                if isinstance(event, DoneEvent):
                    break
            runs[c].append(spec.session.last_stats.tokens_per_s)
    med = {c: statistics.median(v) for c, v in runs.items()}
    medians.append((p.suite, med))
    cells = "  ".join(f"{c} {m:.1f}" for c, m in med.items())
    named = len(spec.replacements(p.prompt)) // 2
    print(f"{p.suite} #{p.index + 1} ({named} named): {cells}  "
          f"told/untold {med['auto-told'] / med['auto-untold']:.3f}  "
          f"told/plain {med['auto-told'] / med['none']:.2f}", flush=True)


def geo(values):
    return math.exp(statistics.mean(math.log(v) for v in values))


for name in dict.fromkeys(s for s, _ in medians):
    got = [m for s, m in medians if s == name]
    print(f"{name}: told/untold {geo([m['auto-told'] / m['auto-untold'] for m in got]):.3f}  "
          f"untold/plain {geo([m['auto-untold'] / m['none'] for m in got]):.3f}  "
          f"told/plain {geo([m['auto-told'] / m['none'] for m in got]):.3f}")
