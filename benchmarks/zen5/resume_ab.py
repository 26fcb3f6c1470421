"""auto with and without the lookups that take up a copy's source again (suffix.py, RESUME_MIN),
in one process, interleaved (the order reverses every repeat), against plain decoding: per
prompt the median tok/s of each, per suite the geometric means. Turning the rule off sets
RESUME_MIN past any match. The record behind benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=. python benchmarks/zen5/resume_ab.py REPEATS SUITE [SUITE ...]
"""

import sys

from _ab import interleaved, report, tok_s

import edgespec.auto.suffix as suffix
from edgespec.api import Speculator
from edgespec.bench.suites import load_suite

spec = Speculator.load(drafter="auto", offline=True)
prompts = [p for name in sys.argv[2:] for p in load_suite(name)]
configs = {"none": ("none", 99), "auto-old": ("auto", 99), "auto-new": ("auto", suffix.RESUME_MIN)}
medians = []
for p in prompts:
    tokens = spec.prompt_tokens(p.prompt, system=p.system)

    def run(c, tokens=tokens, p=p):
        drafter, suffix.RESUME_MIN = configs[c]
        return tok_s(spec, tokens, drafter=drafter, max_tokens=p.max_tokens or 256)

    med = interleaved(configs, int(sys.argv[1]), run)
    medians.append((p.suite, med))
    cells = "  ".join(f"{c} {m:.1f}" for c, m in med.items())
    print(
        f"{p.suite} #{p.index + 1}: {cells}  new/old {med['auto-new'] / med['auto-old']:.3f}"
        f"  new/plain {med['auto-new'] / med['none']:.2f}",
        flush=True,
    )


report(medians, "auto-new", "auto-old")
