"""This folder's runs as the README's tables: the budget's figures before and after (means of
the two runs of each side), and the rounds' cost after prompts of 100 and 4,000 tokens.

    python benchmarks/overhead/quiet/budget.py [FOLDER]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

BUDGET = [  # (what, config, field, budget in us, the grammar's base config for an extra cost)
    ("`none`, greedy", "none greedy", "us_per_token", 150, None),
    ("`auto`, greedy", "auto greedy", "us_per_token", 150, None),
    ("`none`, T = 0.7, top-p 0.95", "none T=0.7", "us_per_token", 400, None),
    ("`auto`, T = 0.7, top-p 0.95", "auto T=0.7", "us_per_token", 400, None),
    ("a draft step, `model` greedy", "model greedy", "drafting_us_per_draft_step", 150, None),
    ("a draft step, `auto` greedy", "auto greedy", "drafting_us_per_draft_step", 150, None),
    ("a draft step, `model` T = 0.7", "model T=0.7", "drafting_us_per_draft_step", 150, None),
    ("a draft step, `auto` T = 0.7", "auto T=0.7", "drafting_us_per_draft_step", 150, None),
    ("JSON schema, extra: `none` greedy", "none greedy json", "us_per_token", 200, "none greedy"),
    ("JSON schema, extra: `none` T = 0.7", "none T=0.7 json", "us_per_token", 200, "none T=0.7"),
    ("JSON schema, extra: `auto` greedy", "auto greedy json", "us_per_token", 200, "auto greedy"),
    ("JSON schema, extra: `auto` T = 0.7", "auto T=0.7 json", "us_per_token", 200, "auto T=0.7"),
]


def mean(runs: list[dict[str, Any]], config: str, field: str) -> float:
    return statistics.mean(float(r[config][field]) for r in runs)


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    sides = {
        side: [json.loads((folder / f"{side}-run{i}.json").read_text()) for i in (1, 2)]
        for side in ("before", "after")
    }
    print("| what | budget | before | after |")
    print("| --- | --- | --- | --- |")
    for what, config, field, budget, base in BUDGET:
        cells = []
        for side in ("before", "after"):
            value = mean(sides[side], config, field)
            if base is not None:
                value -= mean(sides[side], base, field)
            cells.append(f"{value:.0f}")
        print(f"| {what} | {budget} | {cells[0]} | {cells[1]} |")
    print()
    contexts = {
        side: [json.loads((folder / f"{side}-ctx{i}.json").read_text()) for i in (1, 2)]
        for side in ("before", "after")
    }
    print("| config | before, 100 | before, 4,000 | after, 100 | after, 4,000 |")
    print("| --- | --- | --- | --- | --- |")
    for config in contexts["after"][0]:
        cells = [
            f"{mean(contexts[side], config, n):.0f}"
            for side in ("before", "after")
            for n in ("100", "4000")
        ]
        print(f"| {config} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
