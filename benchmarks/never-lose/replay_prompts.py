"""`auto` replayed prompt by prompt on recorded outputs, under several `PolicyConfig` variants
side by side, in target steps (edgespec/auto/replay.py's recorded target: no timing noise).
What `benchmarks/never-lose/README.md` quotes. Sampled outputs (`--collect --temperature T
--samples N`) hold N answers per prompt: a prompt's speed is theirs together.

    PYTHONPATH=. python benchmarks/never-lose/replay_prompts.py OUTPUTS CALIBRATION \\
        --suite chat --suite summarization lookup_risk=1000 base

OUTPUTS: `scripts/replay_policy.py OUTPUTS --collect`; CALIBRATION: a calibration file
(`edgespec plan` caches it; `benchmarks/calibration-*.json`). Each variant is `base` (the
defaults) or `NAME=VALUE[;NAME=VALUE]` (PolicyConfig fields). Prints one line per prompt with
each variant's speed (x plain), then per suite the geometric mean and the lowest prompt.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from edgespec.auto.config import AutoConfig
from edgespec.auto.replay import geo_mean, load_tau, policy_config, replay
from edgespec.options import TREE_WIDTH


def _label(suite: str) -> str:
    """A suite's name in 31 characters: a JSONL file's own name, not its folders'."""
    return (Path(suite).name if suite.endswith(".jsonl") else suite)[:31]


def prompt_speeds(
    outputs: Path,
    tau: dict[int, float],
    configs: Sequence[AutoConfig],
    width: int,
    suites: Sequence[str] | None = None,
) -> dict[tuple[str, int], list[float]]:
    """Per prompt (suite, index), its speed (x plain) under each config. Sampled outputs hold
    several answers to one prompt, and its speed is theirs together (tokens / steps)."""
    prompts: dict[tuple[str, int], list[tuple[int, list[float]]]] = defaultdict(list)
    for position, run in enumerate(json.loads(outputs.read_text())):
        suite = run["suite"]
        if suites and not any(suite.startswith(s) or _label(suite) == s for s in suites):
            continue
        n = len(run["out"])
        steps = [n / replay(run, tau, width, config=config) for config in configs]
        prompts[suite, run.get("index", position)].append((n, steps))
    speeds = {}
    for key, answers in prompts.items():
        tokens = sum(n for n, _ in answers)
        columns = zip(*(s for _, s in answers), strict=True)
        speeds[key] = [tokens / sum(column) for column in columns]
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outputs", type=Path)
    parser.add_argument("calibration", type=Path)
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--suite", action="append", help="suites to replay (default: all)")
    parser.add_argument(
        "--trees", action="store_true", help=f"tree drafts of {TREE_WIDTH} leaves, as auto runs"
    )
    args = parser.parse_args()
    configs = [policy_config([] if v == "base" else v.split(";")) for v in args.variants]
    width = TREE_WIDTH if args.trees else 1
    per_prompt = prompt_speeds(args.outputs, load_tau(args.calibration), configs, width, args.suite)
    print("suite".ljust(32) + " ".join(v[:24].rjust(24) for v in args.variants))
    speeds: dict[str, list[list[float]]] = defaultdict(list)
    for (suite, _), row in per_prompt.items():
        speeds[suite].append(row)
        print(_label(suite).ljust(32) + " ".join(f"{x:24.3f}" for x in row))
    for suite, rows in speeds.items():
        cells = []
        for column in zip(*rows, strict=True):
            cells.append(f"{geo_mean(column):.3f} (min {min(column):.3f})".rjust(24))
        print(f"{_label(suite):32}" + " ".join(cells))


if __name__ == "__main__":
    main()
