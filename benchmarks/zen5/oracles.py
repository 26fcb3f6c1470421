"""What knowing where a copy breaks would be worth: auto's n-gram policy replayed on recorded
greedy outputs (scripts/replay_policy.py) as it is, and with an oracle that sees the output
ahead: "veto" drops every draft whose first token is wrong (a perfect quote-or-paraphrase
signal), "exact" also cuts every draft where it would break (a perfect break predictor). Per
suite the geometric mean over prompts, x plain, for each calibration's tau. The record behind
benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=. python benchmarks/zen5/oracles.py OUTPUTS.json CALIBRATION.json [...]
"""

import json
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, "scripts")
import replay_policy as rp

MODE = "as is"


class Oracle:
    """auto's policy, its drafts cut where the recorded output (read ahead) breaks them."""

    def __init__(self, policy, target):
        self.policy, self.target = policy, target

    def choose(self, proposals):
        choice = self.policy.choose(proposals)
        if MODE == "as is" or choice is None or choice.k == 0:
            return choice
        at = len(self.target.tokens) + 1  # the target's cache holds the context but its last
        held = rp._common(choice.proposal.continuation[: choice.k], self.target.text[at:])
        if held == 0:
            return None  # not drafted: nothing to learn from
        return replace(choice, k=held) if MODE == "exact" else choice

    def observe(self, choice, round_, seconds):
        self.policy.observe(choice, round_, seconds)


paths = [p for p in sys.argv[1:] if "calibration" not in p]
runs = [run for p in paths for run in json.loads(Path(p).read_text())]
for path in (p for p in sys.argv[1:] if "calibration" in p):
    tau = {int(n): v for n, v in json.loads(Path(path).read_text())["tau"].items()}
    print(path)
    results = {}
    for MODE in ("as is", "veto", "exact"):
        per = defaultdict(list)
        for run in runs:
            per[run["suite"]].append(rp.replay(run, tau, watch=Oracle))
        results[MODE] = {s: math.exp(sum(map(math.log, v)) / len(v)) for s, v in per.items()}
    print(f"  {'suite':30} {'as is':>8} {'veto':>8} {'exact':>8}")
    for suite, base in results["as is"].items():
        veto, exact = results["veto"][suite], results["exact"][suite]
        print(f"  {suite:30} {base:7.3f}x {veto:7.3f}x {exact:7.3f}x")
