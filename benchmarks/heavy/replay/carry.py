"""`auto` replayed on recorded heavy-pair outputs, text after text, with the draft's confidence
calibration learned anew for each text (as `Learned.forget` does) or carried from
one to the next (tried in 8951a11, reverted: neutral here), beside an oracle that knows where
the draft's chain breaks. Target steps, no timing noise (edgespec/auto/replay.py's recorded
target and draft).

    PYTHONPATH=. python benchmarks/heavy/replay/carry.py OUTPUTS CALIBRATION

OUTPUTS: `scripts/replay_policy.py --collect --collect-draft --collect-off --target F16 --draft
DRAFT --suite ...` (benchmarks/heavy/*.jsonl, prompts alternating code and prose, then the
built-in chat suite; `--collect-off`: what the draft drafts after its misses, without which the
replay flatters drafting unsure tokens); CALIBRATION: the pair's cache file from `edgespec
plan` (its draft_tau prices the draft's batches). Trees of up to 4 leaves, as the CPU backend
verifies.
"""

from __future__ import annotations

import json
import math
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from edgespec.auto.confidence import ConfidencePower
from edgespec.auto.policy import AdaptiveState
from edgespec.auto.prior import CostModel
from edgespec.auto.replay import Replay
from edgespec.options import TREE_WIDTH

Device = tuple[dict[int, float], dict[int, float], float]  # tau, the draft's tau, c


def replay(
    run: dict[str, Any], device: Device, carried: ConfidencePower | None
) -> tuple[float, ConfidencePower]:
    """Tokens per target step of auto on one output, and the calibration it learned;
    `carried`: the calibration to start from (None: a fresh one)."""
    tau, draft_tau, c = device
    state = None if carried is None else AdaptiveState(confidence=carried)
    replayed = Replay(run, tau, tree_width=TREE_WIDTH, c=c, draft_tau=draft_tau, state=state)
    return replayed.speed(), replayed.policy.state.confidence


def oracle(run: dict[str, Any], device: Device, k_max: int = 16) -> float:
    """Tokens per target step knowing how far the draft's greedy chain follows the output at
    each position: it drafts exactly that far or not at all, the draft reading what it missed
    in one batch before it drafts."""
    tau, draft_tau, c = device
    top, out = [row[0] for row in run["draft"]], run["out"]
    n = len(out)
    agree = []
    for i in range(n):
        j = 0
        while i + j < n and top[i + j] == out[i + j]:
            j += 1
        agree.append(j)
    target, draft = CostModel(tau, 0), CostModel(draft_tau, 0)

    @lru_cache(None)
    def best(i: int, read: int) -> float:  # steps from position i, the draft having read `read`
        if i >= n:
            return 0.0
        steps = 1.0 + best(i + 1, read)
        for k in range(1, min(agree[i], n - i - 1, k_max) + 1):
            cost = c * (draft.tau(max(1, i - read)) + k - 1) + target.tau(k + 1)
            steps = min(steps, cost + best(i + k + 1, i + k - 1))
        return steps

    sys.setrecursionlimit(10 * n + 1000)
    return n / best(0, 0)


def geo(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def kinds_of(runs: list[dict[str, Any]]) -> list[str]:
    """Code or prose: the prompt files alternate code and prose, the chat suite is prose."""
    return ["code" if i % 2 == 0 and run["suite"].endswith(".jsonl") else "prose"
            for i, run in enumerate(runs)]  # fmt: skip


def by_kind(speeds: list[float], kinds: list[str]) -> str:
    """The geo-means of the code and the prose outputs."""
    return ", ".join(
        f"{kind} {geo([s for s, k in zip(speeds, kinds, strict=True) if k == kind]):.3f}x"
        for kind in ("code", "prose")
    )


def auto_and_oracle(runs: list[dict[str, Any]], device: Device) -> list[tuple[str, list[float]]]:
    """Each output's tokens per target step with `auto` (calibration per text) and the oracle."""
    return [
        ("auto", [replay(run, device, None)[0] for run in runs]),
        ("oracle", [oracle(run, device) for run in runs]),
    ]


def main() -> None:
    runs = json.loads(Path(sys.argv[1]).read_text())
    cal = json.loads(Path(sys.argv[2]).read_text())
    device = (
        {int(n): v for n, v in cal["tau"].items()},
        {int(n): v for n, v in cal["draft_tau"].items()},
        cal["draft_step_s"] / cal["target_step_s"],
    )
    kinds = kinds_of(runs)
    fresh = [replay(run, device, None)[0] for run in runs]
    carried: list[float] = []
    calibration = None
    for run in runs:
        speed, calibration = replay(run, device, calibration)
        carried.append(speed)
    for name, speeds in (
        ("oracle", [oracle(run, device) for run in runs]),
        ("auto, calibration per text", fresh),
        ("auto, calibration carried", carried),
    ):
        parts = [
            f"{kind} {geo([s for s, k in zip(speeds, kinds, strict=True) if k == kind]):.3f}x"
            f" (min {min(s for s, k in zip(speeds, kinds, strict=True) if k == kind):.2f})"
            for kind in ("code", "prose")
        ]
        print(f"{name:28s} " + ", ".join(parts) + "  " + " ".join(f"{s:.2f}" for s in speeds))


if __name__ == "__main__":
    main()
