"""auto with and without the lookups that take up a copy's source again (suffix.py, RESUME_MIN),
in one process, interleaved (the order reverses every repeat), against plain decoding: per
prompt the median tok/s of each, per suite the geometric means. Turning the rule off sets
RESUME_MIN past any match. The record behind docs/benchmarks.md (2026-12-01).

    PYTHONPATH=. python docs/bench/zen5/resume_ab.py REPEATS SUITE [SUITE ...]
"""
import math
import statistics
import sys

import edgespec.engine.suffix as suffix
from edgespec.api import Speculator
from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent

spec = Speculator.load(drafter="auto", offline=True)
prompts = [p for name in sys.argv[2:] for p in load_suite(name)]
configs = {"none": ("none", 99), "auto-old": ("auto", 99), "auto-new": ("auto", suffix.RESUME_MIN)}
medians = []
for p in prompts:
    tokens = spec.prompt_tokens(p.prompt, system=p.system)
    runs: dict[str, list[float]] = {c: [] for c in configs}
    for r in range(int(sys.argv[1])):
        for c in list(configs) if r % 2 == 0 else list(configs)[::-1]:
            drafter, suffix.RESUME_MIN = configs[c]
            spec.reset()
            for event in spec.stream(tokens, drafter=drafter, max_tokens=p.max_tokens or 256):
                if isinstance(event, DoneEvent):
                    break
            runs[c].append(spec.session.last_stats.tokens_per_s)
    med = {c: statistics.median(v) for c, v in runs.items()}
    medians.append((p.suite, med))
    cells = "  ".join(f"{c} {m:.1f}" for c, m in med.items())
    print(f"{p.suite} #{p.index + 1}: {cells}  new/old {med['auto-new'] / med['auto-old']:.3f}"
          f"  new/plain {med['auto-new'] / med['none']:.2f}", flush=True)


def geo(values):
    return math.exp(statistics.mean(math.log(v) for v in values))


for name in dict.fromkeys(s for s, _ in medians):
    got = [m for s, m in medians if s == name]
    print(f"{name}: new/old {geo([m['auto-new'] / m['auto-old'] for m in got]):.3f}  "
          f"old/plain {geo([m['auto-old'] / m['none'] for m in got]):.3f}  "
          f"new/plain {geo([m['auto-new'] / m['none'] for m in got]):.3f}")
