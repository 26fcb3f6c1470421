"""`auto`'s lookup rounds replayed on recorded outputs, round by round, in target steps gained
(edgespec/auto/replay.py's recorded target and a calibration's tau: no timing noise).

    PYTHONPATH=. python benchmarks/never-lose/long_rounds.py CALIBRATION OUTPUTS... \\
        [--prompt SUITE INDEX]

With `--prompt`, each answer of that prompt (INDEX 0-based among the SUITE's prompts; sampled
outputs hold several) as its drafted rounds: where in the answer, K, tokens accepted, and the
target steps the round gained over plain decoding (accepted + 1 - tau(K + 1)). Without it, the
rounds of 5 drafted tokens or more of all the outputs, editing suites apart from the others,
grouped by the length of the match the copy was found at and whether it took up a source again
(`resumed`): which long copies pay, and which lose (`first miss`: lost more than one step).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from edgespec.auto.replay import Replay, load_tau
from edgespec.engine.drafters import Lookup
from edgespec.options import TREE_WIDTH

LONG = 5  # drafted tokens from which a round counts as long
MATCHES = ((0, 4), (4, 8), (8, 16), (16, 32), (32, None))


class Round(NamedTuple):
    at: int  # tokens of the answer before it
    drafted: int
    accepted: int
    gain: float  # target steps gained over plain decoding
    match: int  # the copy's match length (0: not a lookup)
    resumed: bool


def rounds(run: dict[str, Any], tau: dict[int, float]) -> list[Round]:
    """auto's drafted rounds on one recorded answer, trees allowed as auto runs them."""
    replayed = Replay(run, tau, tree_width=TREE_WIDTH)
    out = []
    for r in replayed.rounds():
        event, choice = r.event, r.choice
        if event.drafted and choice is not None:
            lookup = choice.proposal if isinstance(choice.proposal, Lookup) else None
            gain = event.accepted + 1 - replayed.costs.tau(event.drafted + 1)
            match, resumed = (lookup.match, lookup.resumed) if lookup else (0, False)
            out.append(Round(r.at, event.drafted, event.accepted, gain, match, resumed))
    return out


def _label(suite: str) -> str:
    return Path(suite).name if suite.endswith(".jsonl") else suite


def trace(runs: list[dict[str, Any]], tau: dict[int, float], suite: str, index: int) -> None:
    mine = [(n, r) for n, r in enumerate(runs) if _label(r["suite"]).startswith(suite)]
    keys = sorted({r.get("index", n) for n, r in mine})
    if not 0 <= index < len(keys):
        raise SystemExit(f"{suite} has {len(keys)} prompts in these outputs")
    for n, run in mine:
        if run.get("index", n) != keys[index]:
            continue
        found = rounds(run, tau)
        steps = len(run["out"]) - sum(r.gain for r in found)
        lost = sum(min(0.0, r.gain) for r in found)
        print(f"answer {run.get('sample', 0)}: {len(run['out'])} tokens, ", end="")
        print(f"{len(run['out']) / steps:.3f}x plain, {lost:.2f} steps lost")
        print("  " + "; ".join(f"@{r.at} k{r.drafted} a{r.accepted} {r.gain:+.2f}" for r in found))


def table(runs: list[dict[str, Any]], tau: dict[int, float]) -> None:
    groups: dict[tuple[str, bool, int], list[float]] = defaultdict(list)
    for run in runs:
        kind = "editing" if "edit" in run["suite"] else "other"
        for r in rounds(run, tau):
            if r.drafted >= LONG:
                band = next(i for i, (lo, hi) in enumerate(MATCHES) if hi is None or r.match < hi)
                groups[kind, r.resumed, band].append(r.gain)
    print("suites   resumed  match      rounds   gained   lost  first miss")
    for (kind, resumed, band), gains in sorted(groups.items()):
        lo, hi = MATCHES[band]
        span = f"{lo}-{hi - 1}" if hi else f"{lo}+"
        lost = sum(min(0.0, g) for g in gains)
        misses = sum(g < -1.0 for g in gains)
        print(
            f"{kind:8} {resumed!s:8} {span:8} {len(gains):8} {sum(gains):+8.1f} "
            f"{lost:+6.1f} {misses:11}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("calibration", type=Path)
    parser.add_argument("outputs", type=Path, nargs="+")
    parser.add_argument("--prompt", nargs=2, metavar=("SUITE", "INDEX"))
    args = parser.parse_args()
    tau = load_tau(args.calibration)
    runs = [run for path in args.outputs for run in json.loads(path.read_text())]
    if args.prompt:
        trace(runs, tau, args.prompt[0], int(args.prompt[1]))
    else:
        table(runs, tau)


if __name__ == "__main__":
    main()
