"""Where the suffix drafter takes up again the source a copy left (suffix.py, Edits.resume): at
the first position of each such stretch in the recorded greedy outputs, whether the draft's
first token is the output's and how many tokens (up to 32) the output holds. The record behind
benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=. python benchmarks/zen5/resume_places.py OUTPUTS.json [OUTPUTS.json ...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from edgespec.auto.replay import common
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import Lookup


def places(paths: Sequence[str]) -> dict[str, list[int]]:
    """Per suite: [places, first token right, tokens held]."""
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for path in paths:
        for run in json.loads(Path(path).read_text()):
            suite = run["suite"].split(",")[0]
            prompt, out = run["prompt"], run["out"]
            drafter = SuffixDrafter(past=run["history"])
            drafter.begin(prompt)
            before = False
            for i in range(len(out)):
                drafter.commit(prompt + out[:i])  # as the engine does after each round
                offered = drafter.offer(prompt + out[:i], 32)
                first = offered[0] if offered else None
                resumed = isinstance(first, Lookup) and first.resumed
                if isinstance(first, Lookup) and resumed and not before:
                    held = common(first.continuation, out[i:])
                    got = found[suite]
                    got[0] += 1
                    got[1] += held > 0
                    got[2] += held
                before = resumed
    return found


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit(__doc__)
    for suite, (n, right, held) in sorted(places(argv).items()):
        print(
            f"{suite:24} places {n:3}  next token right {right:3} ({right / n:.2f})  "
            f"tokens held {held / n:.1f} on average"
        )


if __name__ == "__main__":
    main()
