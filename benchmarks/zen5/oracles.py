"""What knowing where a copy breaks would be worth: auto's n-gram policy replayed on recorded
greedy outputs (edgespec/auto/replay.py) as it is, and with an oracle that sees the output
ahead: "veto" drops every draft whose first token is wrong (a perfect quote-or-paraphrase
signal), "exact" also cuts every draft where it would break (a perfect break predictor). Per
suite the geometric mean over prompts, x plain, for each calibration's tau. The record behind
benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=. python benchmarks/zen5/oracles.py OUTPUTS.json CALIBRATION.json [...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgespec.auto.replay import Recorded, Watch, common, geo_mean, load_tau, replay
from edgespec.engine.drafters import Choice, Lookup, Proposal
from edgespec.engine.events import RoundEvent
from edgespec.engine.generate import DraftLength

MODES = ("as is", "veto", "exact")


class Oracle:
    """auto's policy, its drafts cut where the recorded output (read ahead) breaks them."""

    def __init__(self, policy: DraftLength, target: Recorded, mode: str) -> None:
        self.policy, self.target, self.mode = policy, target, mode

    def choose(self, proposals: Sequence[Proposal]) -> Choice | None:
        choice = self.policy.choose(proposals)
        if self.mode == "as is" or choice is None or choice.k == 0:
            return choice
        assert isinstance(choice.proposal, Lookup)  # no draft model in this replay
        at = len(self.target.tokens) + 1  # the target's cache holds the context but its last
        held = common(choice.proposal.continuation[: choice.k], self.target.text[at:])
        if held == 0:
            return None  # not drafted: nothing to learn from
        return replace(choice, k=held) if self.mode == "exact" else choice

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        self.policy.observe(choice, round_, seconds)


def oracle(mode: str) -> Watch:
    """The replay's watch that puts an Oracle of `mode` before the policy."""
    return lambda policy, target: Oracle(policy, target, mode)


def speeds(runs: Sequence[dict[str, Any]], tau: dict[int, float], mode: str) -> dict[str, float]:
    """Per suite, the geometric mean of the prompts' speeds (x plain) with the oracle `mode`."""
    per = defaultdict(list)
    for run in runs:
        per[run["suite"]].append(replay(run, tau, watch=oracle(mode)))
    return {suite: geo_mean(v) for suite, v in per.items()}


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit(__doc__)
    paths = [p for p in argv if "calibration" not in p]
    runs = [run for p in paths for run in json.loads(Path(p).read_text())]
    for path in (p for p in argv if "calibration" in p):
        tau = load_tau(Path(path))
        print(path)
        results = {mode: speeds(runs, tau, mode) for mode in MODES}
        print(f"  {'suite':30} {'as is':>8} {'veto':>8} {'exact':>8}")
        for suite, base in results["as is"].items():
            veto, exact = results["veto"][suite], results["exact"][suite]
            print(f"  {suite:30} {base:7.3f}x {veto:7.3f}x {exact:7.3f}x")


if __name__ == "__main__":
    main()
