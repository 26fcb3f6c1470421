"""What the GPU check learns about batch shapes (check.py runs it on the 1.5B target), each a
question that calibration and `auto`'s learner rest on and that only a GPU answers:

- first use: does a batch size's first run in a process cost more than its later runs, and does
  a second context in the same process pay it again (edgespec warms each shape per model)?
- long context: is tau(n) = T(n)/T(1) at 1,024 and 4,096 tokens of context the one calibration
  measures at 64 (Metal switches its flash-attention kernels from 1,024)?
- CUDA graphs: does a plain step repeated (llama.cpp captures a graph after two identical
  calls) cost what a step between other sizes costs (calibration's interleaved passes)?
- learned: after a new process's first rounds of `auto`, the plain step it prices, against the
  calibration's (the plan step before this one cached it).

    python benchmarks/gpu/shapes.py TARGET --draft DRAFT --out shapes.json [--gpu-layers N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter
from typing import Any

SIZES = (1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33)  # calibration's points and their neighbours
CONTEXTS = (64, 1024, 4096)  # calibration's, and past Metal's flash-attention switch
TAU_SIZES = (1, 2, 4, 8, 16, 32)
REPEATS = 5  # timed runs of each size, after its first
GRAPH_STEPS = 20  # plain steps in a row, and as many between other sizes
TEXT = "def merge_sort(items):\n    return sorted(items)  # a stand-in\n" * 512

Clock = Callable[[], float]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class Runner:
    """Decodes of n tokens after a fixed context, each timed and undone."""

    def __init__(self, model: Any, tokens: Sequence[int], context: int, clock: Clock) -> None:
        self.model, self.clock = model, clock
        model.rewind(0)
        for start in range(0, context, 512):  # the context in chunks, as a prompt is read
            model.decode(list(tokens[start : min(context, start + 512)]), 0)
        self.base = model.n_past
        self.probe = list(tokens[context : context + max(SIZES)])

    def run(self, n: int) -> float:
        start = self.clock()
        self.model.decode(self.probe[:n], n)
        self.model.rewind(self.base)
        return self.clock() - start


def first_use(runner: Runner, sizes: Sequence[int] = SIZES) -> dict[str, Any]:
    """Each size's first run against the median of the next REPEATS."""
    out = {}
    for n in sizes:
        first = runner.run(n)
        warm = statistics.median(runner.run(n) for _ in range(REPEATS))
        out[str(n)] = {"first_ms": _ms(first), "warm_ms": _ms(warm), "extra_ms": _ms(first - warm)}
    return out


def tau_at(runner: Runner, sizes: Sequence[int] = TAU_SIZES) -> dict[str, Any]:
    """T(1) and tau(n) at this context: every size warmed, then REPEATS interleaved passes."""
    for n in sizes:
        runner.run(n)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for i in range(REPEATS):
        for n in sizes if i % 2 == 0 else reversed(sizes):
            times[n].append(runner.run(n))
    step = statistics.median(times[1])
    tau = {str(n): round(statistics.median(ts) / step, 4) for n, ts in times.items()}
    return {"step_ms": _ms(step), "tau": tau}


def graphs(runner: Runner, other: int = 4, steps: int = GRAPH_STEPS) -> dict[str, Any]:
    """A plain step repeated against one right after a step of `other` tokens."""
    runner.run(1)
    runner.run(other)
    repeated = [runner.run(1) for _ in range(steps)][2:]  # a graph from the third call on
    between = []
    for _ in range(steps):
        runner.run(other)
        between.append(runner.run(1))
    alone, mixed = statistics.median(repeated), statistics.median(between)
    return {
        "repeated_ms": _ms(alone),
        "between_ms": _ms(mixed),
        "between_over_repeated": round(mixed / alone, 4),
    }


def shapes(load: Callable[[int], Any], tokens: Sequence[int], clock: Clock) -> dict[str, Any]:
    """The first three questions, on models `load(n_ctx)` gives (a new context each)."""
    model = load(max(CONTEXTS) + 2 * max(SIZES))
    try:
        doc: dict[str, Any] = {"first_use": first_use(Runner(model, tokens, CONTEXTS[0], clock))}
        second = load(CONTEXTS[0] + 2 * max(SIZES))
        try:  # the same shapes on a second context of the same process
            doc["first_use_second_context"] = first_use(
                Runner(second, tokens, CONTEXTS[0], clock), (1, 8, 32)
            )
        finally:
            second.close()
        doc["tau_by_context"] = {str(c): tau_at(Runner(model, tokens, c, clock)) for c in CONTEXTS}
        doc["graphs"] = graphs(Runner(model, tokens, CONTEXTS[0], clock))
    finally:
        model.close()
    base = doc["tau_by_context"][str(CONTEXTS[0])]["tau"]
    doc["tau_over_calibrations"] = {
        str(c): {n: round(v / base[n], 4) for n, v in doc["tau_by_context"][str(c)]["tau"].items()}
        for c in CONTEXTS[1:]
    }
    return doc


class Target:
    """The target of a Speculator loaded for it alone (`none`: no draft, no calibration), with
    what the Runner asks of a model; closing it closes the Speculator."""

    def __init__(self, path: Path, n_ctx: int, gpu_layers: int) -> None:
        from edgespec import Speculator

        self.spec = Speculator.load(
            target=str(path), drafter="none", n_ctx=n_ctx, n_gpu_layers=gpu_layers
        )
        self.model = self.spec.target

    @property
    def n_past(self) -> int:
        return int(self.model.n_past)

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> Any:
        return self.model.decode(tokens, n_logits)

    def rewind(self, n_past: int) -> None:
        self.model.rewind(n_past)

    def close(self) -> None:
        self.spec.close()


def learned(target: Path, draft: Path, gpu_layers: int | None) -> dict[str, Any]:
    """A new process's `auto` after one answer: the plain step its rounds taught it, against
    the calibration's step (cached by the plan step in this EDGESPEC_HOME)."""
    from edgespec import Speculator

    with Speculator.load(
        target=str(target), draft=str(draft), drafter="auto", n_gpu_layers=gpu_layers
    ) as spec:
        spec.generate(TEXT[:400], drafter="auto", max_tokens=64, raw=True)
        assert spec.plan is not None and spec.plan.calibration is not None
        step = spec.learned_step_s
        calibrated = spec.plan.calibration.target_step_s
        if step is None:
            return {"calibrated_step_ms": _ms(calibrated), "learned_step_ms": None}
        return {
            "calibrated_step_ms": _ms(calibrated),
            "learned_step_ms": _ms(step),
            "learned_over_calibrated": round(step / calibrated, 4),
            "calibration_cached": spec.plan.calibration_cached,
        }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpu-layers", type=int, default=-1)
    args = parser.parse_args(argv)

    def load(n_ctx: int) -> Target:
        return Target(args.target, n_ctx, args.gpu_layers)

    probe = load(256)
    tokens = probe.model.tokenize(TEXT, add_special=False)
    probe.close()
    doc = shapes(load, tokens, perf_counter)
    doc["learned"] = learned(args.target, args.draft, args.gpu_layers)
    args.out.write_text(json.dumps(doc, indent=1))
    json.dump(doc, sys.stdout)


if __name__ == "__main__":
    main()
