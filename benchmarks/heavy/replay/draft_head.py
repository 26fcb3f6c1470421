"""Draft models compared on what they cost a step and how often they agree with the target, then
`auto` replayed with each (scripts/replay_policy.py's recorded target; carry.py's replay).

    PYTHONPATH=. python benchmarks/heavy/replay/draft_head.py OUTPUTS CALIBRATION DRAFT...

CALIBRATION's costs were measured with the first DRAFT. Each draft's rows are recorded anew (its
two likeliest tokens at each position of each output, as `--collect-draft` does) and its step is
priced at the calibration's times the ratio of its one-token decode to the first draft's, timed
here interleaved (medians). The record of what the draft drafts after its misses (`off`) is the
outputs' (the first draft's): close for drafts that agree with it. Used to judge drafts
quantized otherwise (the official 0.5B file: mostly Q5_0, a Q8_0 output layer of 138 MiB).
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
from pathlib import Path
from time import perf_counter
from typing import Any

from carry import Device, auto_and_oracle, by_kind, kinds_of

from edgespec.engine.drafters import top_two
from edgespec.llamacpp.model import LlamaModel, LoadOptions

CTX = 2048


def warmed(model: LlamaModel) -> LlamaModel:
    """`model` with 200 tokens of context in its cache, the one its decodes are timed after."""
    model.rewind(0)
    model.decode(list(range(1000, 1200)), 1)
    return model


def decode_s(model: LlamaModel, n_logits: int = 1, steps: int = 20) -> float:
    """Seconds of a one-token decode (`n_logits` 0: llama.cpp skips the output layer), the mean
    of `steps`, the cache rewound afterwards."""
    base = model.n_past
    started = perf_counter()
    for i in range(steps):
        model.decode([1000 + i], n_logits)
    model.rewind(base)
    return (perf_counter() - started) / steps


def step_times(models: list[LlamaModel], repeats: int = 7) -> list[float]:
    """Median seconds of a one-token decode with its logits, the models taking turns."""
    for model in models:
        warmed(model)
    times: list[list[float]] = [[] for _ in models]
    for _ in range(repeats):
        for model, seen in zip(models, times, strict=True):
            seen.append(decode_s(model))
    return [statistics.median(seen) for seen in times]


def rows(model: LlamaModel, run: dict[str, Any]) -> list[list[float]]:
    """The model's two likeliest tokens and their probabilities at each position of the output."""
    model.rewind(0)
    prompt, out = run["prompt"], run["out"]
    logits = model.decode(prompt + out[:-1], len(out))
    return [[a, b, round(pa, 4), round(pb, 4)] for (a, pa), (b, pb) in map(top_two, logits)]


def main() -> None:
    runs = json.loads(Path(sys.argv[1]).read_text())
    cal = json.loads(Path(sys.argv[2]).read_text())
    paths = sys.argv[3:]
    models = [LlamaModel(path, LoadOptions(n_ctx=CTX)) for path in paths]
    seconds = step_times(models)
    tau = {int(n): v for n, v in cal["tau"].items()}
    draft_tau = {int(n): v for n, v in cal["draft_tau"].items()}
    c = cal["draft_step_s"] / cal["target_step_s"]
    kinds = kinds_of(runs)
    for path, model, step in zip(paths, models, seconds, strict=True):
        these = copy.deepcopy(runs)
        for run in these:
            run["draft"] = rows(model, run)
        device: Device = (tau, draft_tau, c * step / seconds[0])
        hits = [
            statistics.mean(row[0] == t for row, t in zip(run["draft"], run["out"], strict=True))
            for run in these
        ]
        agree = {
            kind: statistics.mean(h for h, k in zip(hits, kinds, strict=True) if k == kind)
            for kind in ("code", "prose")
        }
        print(
            f"{Path(path).name}: a step {1000 * step:.2f} ms (c {device[2]:.3f}), first choice"
            f" the target's: code {agree['code']:.1%}, prose {agree['prose']:.1%}"
        )
        for name, speeds in auto_and_oracle(these, device):
            rest = " ".join(f"{s:.2f}" for s in speeds)
            print(f"  {name:6s} {by_kind(speeds, kinds)}  {rest}")


if __name__ == "__main__":
    main()
