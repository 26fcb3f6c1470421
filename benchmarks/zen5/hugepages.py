"""Load the default target with or without huge pages and decode greedily: load time, decode
speed, how much of the process is on huge pages. One load per process (run it alternating):

    for i in 1 2 3 4; do for m in off on; do
        python hugepages.py $m 0; python hugepages.py $m 800
    done; done

The second argument is the context decoded first (tokens of edgespec/auto/policy.py)."""

import sys
import time
from pathlib import Path

import numpy as np

from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry


def main() -> None:
    mode, context = sys.argv[1], int(sys.argv[2])
    target = files.fetch(load_registry().default_pair.target).path
    started = time.perf_counter()
    model = LlamaModel(target, LoadOptions(huge_pages=mode == "on"))
    load = time.perf_counter() - started
    source = (Path(__file__).parents[2] / "edgespec/auto/policy.py").read_text()
    model.decode(model.tokenize(source, add_special=False)[: max(context, 3)], 1)
    token, speeds = 16, []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(48):
            token = int(np.argmax(model.decode([token])[0]))
        speeds.append(48 / (time.perf_counter() - started))
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    huge_kb = next(int(line.split()[1]) for line in rollup if line.startswith("AnonHugePages"))
    print(
        f"{mode:3s} context {context:4d} load {load:.2f} s decode {np.median(speeds):.1f} tok/s "
        f"on huge pages {huge_kb >> 10} MB"
    )


if __name__ == "__main__":
    main()
