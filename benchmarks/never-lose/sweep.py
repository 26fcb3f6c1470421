"""`PolicyConfig` variants replayed on many sets of recorded outputs under several CPUs' tau,
in one summary line each: what the never-lose goal and the editing suites make of a variant
(replay_prompts.py has the prompt-by-prompt view).

    PYTHONPATH=. python benchmarks/never-lose/sweep.py --outputs OUT.json [--outputs ...] \\
        --calibration CAL.json [--calibration ...] base risk_base=1000000 "NAME=VALUE;..."

Per variant: the prompts of the new-text suites (chat, summarization, code generation) under
0.97x plain, counted once per set of outputs and tau; the lowest; and per suite kind the
geometric mean over all sets and tau of its prompts' speeds relative to the first variant's.
Tree drafts as `auto` runs them.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

from replay_prompts import prompt_speeds  # beside this script

from edgespec.auto.replay import load_tau, policy_config
from edgespec.options import TREE_WIDTH

GOAL = 0.97  # the never-lose goal: x plain on every prompt
EDITING = ("code_editing", "multi_turn_editing")  # copy suites: judged by their speed


def _kind(suite: str) -> str:
    """A suite's kind across the sets: `heldout3/chat.jsonl` and `chat` are both chat."""
    name = Path(suite).name.removesuffix(".jsonl")
    return name.split(",")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--outputs", type=Path, action="append", required=True)
    parser.add_argument("--calibration", type=Path, action="append", required=True)
    args = parser.parse_args()
    configs = [policy_config([] if v == "base" else v.split(";")) for v in args.variants]
    under: list[int] = [0] * len(configs)
    lowest: list[float] = [math.inf] * len(configs)
    # Per suite kind, the log of each prompt's speed relative to the first variant's.
    relative: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in configs])
    new_text = 0
    for calibration in args.calibration:
        tau = load_tau(calibration)
        for outputs in args.outputs:
            for (suite, _), row in prompt_speeds(outputs, tau, configs, TREE_WIDTH).items():
                kind = _kind(suite)
                for i, speed in enumerate(row):
                    relative[kind][i].append(math.log(speed / row[0]))
                if kind in EDITING:
                    continue
                new_text += 1
                for i, speed in enumerate(row):
                    under[i] += speed < GOAL
                    lowest[i] = min(lowest[i], speed)
    kinds = sorted(relative)
    print(f"{new_text} prompt-costs of new text; relative: geo-mean x the first variant's")
    print("variant".ljust(40) + "under  lowest " + " ".join(k[:12].rjust(12) for k in kinds))
    for i, variant in enumerate(args.variants):
        cells = " ".join(
            f"{math.exp(sum(relative[k][i]) / len(relative[k][i])):12.4f}" for k in kinds
        )
        print(f"{variant[:39]:40}{under[i]:5d} {lowest[i]:7.3f} {cells}")


if __name__ == "__main__":
    main()
