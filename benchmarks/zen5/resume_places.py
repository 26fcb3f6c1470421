"""Where the suffix drafter takes up again the source a copy left (suffix.py, Edits.resume): at
the first position of each such stretch in the recorded greedy outputs, whether the draft's
first token is the output's and how many tokens (up to 32) the output holds. The record behind
benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=. python benchmarks/zen5/resume_places.py OUTPUTS.json [OUTPUTS.json ...]
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

from edgespec.auto.suffix import SuffixDrafter

found = defaultdict(lambda: [0, 0, 0])  # suite -> [places, first token right, tokens held]
for path in sys.argv[1:]:
    for run in json.loads(Path(path).read_text()):
        suite = run["suite"].split(",")[0]
        prompt, out = run["prompt"], run["out"]
        drafter = SuffixDrafter(past=run["history"])
        drafter.begin(prompt)
        before = False
        for i in range(len(out)):
            drafter.commit(prompt + out[:i])  # as the engine does after each round
            offered = drafter.offer(prompt + out[:i], 32)
            resumed = bool(offered and offered[0].resumed)
            if resumed and not before:
                draft = offered[0].continuation
                held = 0
                while held < len(draft) and i + held < len(out) and draft[held] == out[i + held]:
                    held += 1
                got = found[suite]
                got[0] += 1
                got[1] += held > 0
                got[2] += held
            before = resumed
for suite, (places, right, held) in sorted(found.items()):
    print(
        f"{suite:24} places {places:3}  next token right {right:3} ({right / places:.2f})  "
        f"tokens held {held / places:.1f} on average"
    )
