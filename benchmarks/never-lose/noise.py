"""How many prompts this VM's noise alone puts under 0.97x: `auto` against plain decoding in a
`bench --json` file, each prompt's repeats relabelled.

    python benchmarks/never-lose/noise.py BENCH.json [--config auto] [--floor 0.97]

For each prompt, the runs of plain decoding and of CONFIG are pooled and split every way into
two groups of the original sizes (all C(2n, n) splits: an exact permutation test). Under "no
difference", each split's median ratio is as likely as the observed one, which gives:
- p_low: the chance of a ratio at most the observed one (small: CONFIG really is slower);
- p_floor: the chance of a ratio under --floor were CONFIG exactly as fast as plain decoding:
  CONFIG's runs are first divided by the observed ratio (so that a real difference does not
  widen the spread), then relabelled.
The sum of p_floor over prompts is how many prompts noise alone is expected to put under the
floor. Also shown per prompt: whether CONFIG drafted at all (a prompt where nothing was drafted
runs plain decoding through the same loop, so its ratio measures noise and overhead only).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any


def split_ratios(plain: list[float], other: list[float]) -> list[float]:
    """The median ratio other / plain over every relabelling of the pooled runs."""
    pooled = plain + other
    ratios = []
    for chosen in itertools.combinations(range(len(pooled)), len(other)):
        picked = set(chosen)
        a = [pooled[i] for i in picked]
        b = [pooled[i] for i in range(len(pooled)) if i not in picked]
        ratios.append(statistics.median(a) / statistics.median(b))
    return ratios


def prompt_row(prompt: dict[str, Any], config: str, floor: float) -> dict[str, Any]:
    plain = [run["tokens_per_s"] for run in prompt["runs"]["none"]]
    other = [run["tokens_per_s"] for run in prompt["runs"][config]]
    observed = statistics.median(other) / statistics.median(plain)
    relabelled = split_ratios(plain, other)
    centred = split_ratios(plain, [x / observed for x in other])
    return {
        "prompt": f"{prompt['suite']} {prompt['index'] + 1}",
        "ratio": observed,
        "p_low": sum(r <= observed + 1e-12 for r in relabelled) / len(relabelled),
        "p_floor": sum(r < floor for r in centred) / len(centred),
        "drafted": any(
            run["mean_accepted_length"] > 1.0 or run["acceptance_rate"] > 0
            for run in prompt["runs"][config]
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json")
    ap.add_argument("--config", default="auto")
    ap.add_argument("--floor", type=float, default=0.97)
    args = ap.parse_args()
    report = json.loads(Path(args.bench_json).read_text())
    rows = [prompt_row(p, args.config, args.floor) for p in report["prompts"]]
    print(f"{args.bench_json}: {args.config} / none, {report['settings']['repeats']} repeats")
    print("| prompt | ratio | p(ratio <= this), relabelled | p(< floor) at 1.00x | drafted |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['prompt']} | {row['ratio']:.2f}x | {row['p_low']:.2f} "
            f"| {row['p_floor']:.2f} | {'yes' if row['drafted'] else 'no'} |"
        )
    under = sum(row["ratio"] < args.floor for row in rows)
    expected = sum(row["p_floor"] for row in rows)
    print(
        f"\nunder {args.floor}x: {under} of {len(rows)}; expected were every prompt at 1.00x: "
        f"{expected:.1f}; p(ratio <= observed) < 0.05 on {sum(r['p_low'] < 0.05 for r in rows)}"
    )


if __name__ == "__main__":
    main()
