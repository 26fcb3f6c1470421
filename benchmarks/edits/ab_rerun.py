"""The held-out longer files again, 3 repeats, edits on and off; and where an output left another
run's, the logit gap of the target's top two tokens there (a near-tie or not).

    PYTHONPATH=.:benchmarks/edits .venv/bin/python benchmarks/edits/ab_rerun.py
"""

import statistics
from pathlib import Path

import numpy as np
from _common import edits, prompt_tokens, spec

from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent, TokenEvent

HELDOUT = "benchmarks/heldout"
JOBS = [(f"{HELDOUT}/heldout_code_editing.jsonl", 2, 256, ["plain", "auto", "auto+edits"], 1)] + [
    (f"{HELDOUT}/heldout_long_editing.jsonl", i, 512, ["auto", "auto+edits"], 3)
    for i in (1, 2, 3, 4)
]


def one_run(name: str, prompt: list[int], max_tokens: int) -> tuple[float, list[int]]:
    edits(name == "auto+edits")
    spec.reset()
    out: list[int] = []
    tok_s = 0.0
    drafter = "none" if name == "plain" else "auto"
    for event in spec.stream(prompt, drafter=drafter, max_tokens=max_tokens):
        if isinstance(event, TokenEvent):
            out.append(event.token)
        elif isinstance(event, DoneEvent):
            tok_s = event.stats.tokens_per_s
    return tok_s, out


def near_tie(prompt: list[int], ref: list[int], other: list[int]) -> tuple[int, float]:
    """Where `other` first leaves `ref`, and the gap of the target's top two logits there."""
    pairs = zip(other, ref, strict=False)
    d = next((j for j, (a, b) in enumerate(pairs) if a != b), min(len(other), len(ref)))
    spec.reset()
    spec.target.rewind(0)
    top = np.sort(spec.target.decode(prompt + ref[:d])[-1])[-2:]
    return d, float(top[1] - top[0])


def main() -> None:
    for suite, i, max_tokens, names, repeats in JOBS:
        prompt = prompt_tokens(load_suite(suite)[i - 1].prompt)
        runs: dict[str, list[float]] = {n: [] for n in names}
        outs: dict[str, list[list[int]]] = {}
        for r in range(repeats):
            for name in names if r % 2 == 0 else names[::-1]:
                tok_s, out = one_run(name, prompt, max_tokens)
                runs[name].append(tok_s)
                outs.setdefault(name, []).append(out)
        med = {k: statistics.median(v) for k, v in runs.items()}
        rounded = {k: [round(x, 1) for x in v] for k, v in runs.items()}
        ratio = med["auto+edits"] / med["auto"]
        print(Path(suite).name, i, rounded, f"edits/auto {ratio:.3f}", flush=True)
        ref = outs[names[0]][0]
        for name, outputs in outs.items():
            for out in outputs:
                if out != ref:
                    d, gap = near_tie(prompt, ref, out)
                    print(
                        f"  {name} differs from {names[0]} at token {d}: "
                        f"logit gap of the top two there {gap:.3f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
