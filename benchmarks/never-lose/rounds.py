"""Where `auto`'s time goes on one prompt, round by round, against plain decoding's steps.

    PYTHONPATH=. python benchmarks/never-lose/rounds.py SUITE INDEX [--repeats 5]
        [--max-tokens 128] [--pair NAME] [--configs none,auto] [--json OUT]

SUITE is a built-in suite or a JSONL file, INDEX a prompt's place in it (0-based). The
configurations run interleaved in one process (the order reversed every repeat), each run from
a fresh context as `edgespec bench` runs them. Reported per configuration, medians over the
repeats: tokens/s; the time of a target pass by how many tokens it verified, in plain steps of
the same run set (the calibration's tau printed beside them); the time outside the rounds;
and, run by run, the tokens per plain step had every pass cost what the calibration says
(`calibrated`: what the decisions are worth without this VM's timing noise). What a prompt
loses against plain decoding is then the sum of: passes that verified drafts the target did
not take, passes that cost more than the calibration says, and Python.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from typing import Any

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent, RoundEvent


def one_run(spec: Speculator, tokens: list[int], config: str, max_tokens: int) -> dict[str, Any]:
    """One generation: its speed, and each round's (drafter, tokens verified, accepted, seconds)."""
    spec.reset()
    rounds: list[tuple[str, int, int, float, float]] = []
    for event in spec.stream(tokens, drafter=config, max_tokens=max_tokens):
        if isinstance(event, RoundEvent):
            verified = 1 + event.drafted  # a tree's drafted counts all its nodes
            rounds.append((event.drafter, verified, event.accepted, event.verify_s, event.draft_s))
        elif isinstance(event, DoneEvent):
            stats = event.stats
    inside = sum(r[3] + r[4] for r in rounds)
    return {
        "tokens_per_s": stats.tokens_per_s,
        "generated": stats.generated,
        "rounds": rounds,
        "outside_ms_per_token": 1000 * (stats.decode_s - inside) / max(stats.generated, 1),
    }


def calibrated(run: dict[str, Any], costs: CostModel) -> float:
    """The run's tokens per plain step had each pass cost what the calibration says (as the
    planner prices it): its decisions' worth without this VM's timing noise (plain decoding:
    1, less its last pass)."""
    return run["generated"] / sum(costs.tau(r[1]) for r in run["rounds"])


def summary(runs: list[dict[str, Any]], step: float, tau: dict[int, float]) -> dict[str, Any]:
    """Medians over runs; pass times in plain steps (`step`, plain decoding's median pass)."""
    by_size: dict[int, list[float]] = defaultdict(list)
    wasted = []
    for run in runs:
        lost = 0.0
        for _, verified, accepted, verify_s, _ in run["rounds"]:
            by_size[verified].append(verify_s / step)
            if verified > 1:  # the pass's cost beyond a plain step, less the tokens it gained
                lost += verify_s / step - 1 - accepted
        wasted.append(lost / max(run["generated"], 1))
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
        "passes": {
            n: (len(v) // len(runs), round(statistics.median(v), 2))
            for n, v in sorted(by_size.items())
        },
        "steps_lost_per_token": round(statistics.median(wasted), 3),
        "calibrated": [round(calibrated(r, CostModel(tau, 0.0)), 3) for r in runs] if tau else None,
        "outside_ms_per_token": round(
            statistics.median(r["outside_ms_per_token"] for r in runs), 2
        ),
        "draft_s_per_token": round(
            statistics.median(
                sum(r[4] for r in run["rounds"]) / max(run["generated"], 1) for run in runs
            ),
            4,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite")
    ap.add_argument("index", type=int)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--configs", default="none,auto")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    prompt = load_suite(args.suite)[args.index]
    configs = args.configs.split(",")
    if "none" not in configs:
        ap.error("--configs must hold none: its passes are the unit")
    with Speculator.load(args.pair, offline=True, drafter="auto") as spec:
        tokens = spec.prompt_tokens(prompt.prompt, system=prompt.system)
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for r in range(args.repeats):
            for config in configs if r % 2 == 0 else reversed(configs):
                runs[config].append(one_run(spec, tokens, config, args.max_tokens))
        calibration = spec.plan.calibration if spec.plan is not None else None
    step = statistics.median(x[3] for run in runs["none"] for x in run["rounds"])
    tau = calibration.tau if calibration is not None else {}
    print(f"{args.suite} #{args.index + 1}: plain step {1000 * step:.1f} ms; tau {tau}")
    out = {c: summary(v, step, tau) for c, v in runs.items()}
    for config, s in out.items():
        print(f"{config}: {s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"step_s": step, "tau": tau, "summary": out, "runs": runs}, f)


if __name__ == "__main__":
    main()
