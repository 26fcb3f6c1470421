"""auto told and not told what the instruction asks to replace (hints.py: "rename `a` to `b`",
"from 8080 to 3000"), in one process, interleaved (the order reverses every repeat), against
plain decoding: per prompt the median tok/s of each, per suite the geometric means. On a prompt
whose instruction names no replacement the two auto runs are the same: their ratio is the
noise. The record behind benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=. python benchmarks/zen5/hints_ab.py REPEATS SUITE [SUITE ...]
"""

import sys

from _ab import interleaved, report, tok_s

from edgespec.api import Speculator
from edgespec.bench.suites import load_suite

spec = Speculator.load(drafter="auto", offline=True)
prompts = [p for name in sys.argv[2:] for p in load_suite(name)]
medians = []
for p in prompts:
    tokens = spec.prompt_tokens(p.prompt, system=p.system)
    told = {"none": "", "auto-untold": "", "auto-told": p.prompt}

    def run(c, tokens=tokens, p=p, told=told):
        drafter = "none" if c == "none" else "auto"
        return tok_s(
            spec, tokens, drafter=drafter, max_tokens=p.max_tokens or 256, instruction=told[c]
        )

    med = interleaved(told, int(sys.argv[1]), run)
    medians.append((p.suite, med))
    cells = "  ".join(f"{c} {m:.1f}" for c, m in med.items())
    named = len(spec.replacements(p.prompt)) // 2
    print(
        f"{p.suite} #{p.index + 1} ({named} named): {cells}  "
        f"told/untold {med['auto-told'] / med['auto-untold']:.3f}  "
        f"told/plain {med['auto-told'] / med['none']:.2f}",
        flush=True,
    )


report(medians, "auto-told", "auto-untold")
