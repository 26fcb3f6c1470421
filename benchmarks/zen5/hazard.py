"""Where copies break: at every position of the recorded greedy outputs where the suffix drafter
copies (the context's last 8 tokens occurred before), a 48-token copy is compared with what the
target went on to write; per match length (how far back the copy's match reaches, not capped
at 64 here), the share of copies that broke at draft token i among those that got that far.
The record behind benchmarks/HISTORY.md (2026-12-01).

    python benchmarks/zen5/hazard.py SUITE[,SUITE...] OUTPUTS.json [OUTPUTS.json ...]
"""

import sys
from collections import defaultdict

from _copies import copies

BUCKETS = [(8, 12), (12, 16), (16, 24), (24, 32), (32, 48), (48, 64), (64, 128), (128, 1 << 30)]
DEPTHS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
suites = sys.argv[1].split(",")
risk = defaultdict(lambda: defaultdict(lambda: [0, 0]))  # bucket -> depth -> [reached, broke]
for run, t, copy, reach in copies(sys.argv[2:], lambda suite: suite.split(",")[0] in suites):
    out = run["out"]
    a = 0
    while a < len(copy) and t + a < len(out) and copy[a] == out[t + a]:
        a += 1
    b = next(i for i, (lo, hi) in enumerate(BUCKETS) if lo <= reach < hi)
    for i in range(min(len(copy), len(out) - t)):
        risk[b][i][0] += 1
        if a == i:
            risk[b][i][1] += 1
            break
print(f"{','.join(suites)}: share broken at draft token i (copies that got that far)")
for b, (lo, hi) in enumerate(BUCKETS):
    if risk[b]:
        cells = " ".join(
            f"{i}:{risk[b][i][1] / risk[b][i][0]:.3f}({risk[b][i][0]})"
            if risk[b][i][0]
            else f"{i}:-"
            for i in DEPTHS
        )
        print(f"  match {lo}-{hi if hi < 1 << 30 else 'more'} tokens: {cells}")
