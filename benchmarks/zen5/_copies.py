"""What both scripts here share: every position of the recorded greedy outputs where the suffix
drafter copies, with its 48-token copy and how far back its match reaches (uncapped)."""

import json
from dataclasses import replace
from pathlib import Path

from edgespec.auto.config import AUTO
from edgespec.auto.suffix import SuffixDrafter

UNCAPPED = replace(AUTO.suffix, copy_reach=1 << 30)  # how far a match reaches, uncapped


def copies(paths, keep):
    """(run, position in its output, copy, reach) for the runs whose suite `keep` accepts."""
    for path in paths:
        for run in json.loads(Path(path).read_text()):
            if not keep(run["suite"]):
                continue
            drafter = SuffixDrafter(UNCAPPED)
            drafter.remember(run["history"])
            prompt, out = run["prompt"], run["out"]
            drafter.begin(prompt)
            for t in range(len(out)):
                context = prompt + out[:t]
                drafter.live.add(context, drafter.live.tokens)
                copy, reach, _ = drafter._copy(context, 48)
                if copy:
                    yield run, t, copy, reach
