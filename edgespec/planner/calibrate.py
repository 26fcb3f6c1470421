"""Calibration: measure on this device what a target step, a verification of n tokens and a
draft step cost, in a few seconds, and keep the result on disk."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from edgespec.engine.protocol import Model
from edgespec.system import cachefile

# Verification lengths: tau is not monotone, so the policy drafts K only where tau(K+1) was
# measured; beyond TAU_CORE only where the budget affords them all (cheap verification).
TAU_CORE = (*range(1, 9), 16, 32)
TAU_POINTS = (*range(1, 18), 20, 24, 28, 32)
# Draft-model batches: a step, a catch-up after a round, a prefill (per token).
DRAFT_POINTS = (1, 2, 4, 32)
# The KV length measured at: tau, a ratio at one length, hardly moves with it, and a longer
# context costs more to read in than the measurements (measured: docs/tuning.md, Calibration's
# context).
CONTEXT_TOKENS = 64
# Measuring time in target steps, so that it scales with the device (the draft: a quarter).
BUDGET_STEPS = 150
# Timed passes after the warm-up, more while the budget lasts; a CPU may stop at one
# (measured: docs/tuning.md, Calibration passes), a GPU's median of three ignores one slow run.
MIN_PASSES, GPU_MIN_PASSES, MAX_PASSES = 1, 3, 5
# `prior`, before a device is measured: a step reads the weights once at PRIOR_BYTES_PER_S, a
# draft step costs its share of the bytes, verifying n tokens 1 + PRIOR_TAU_SLOPE * (n - 1)
# steps: guesses between steep and flat devices, which the rounds correct (auto/costs.py).
PRIOR_BYTES_PER_S = 15e9
PRIOR_TAU_SLOPE = 0.25


@dataclass(frozen=True)
class Calibration:
    target_step_s: float
    tau: dict[int, float]
    draft_step_s: float | None = None  # None: no draft model was measured
    seconds: float = 0.0  # how long the calibration took
    key: dict[str, Any] = field(default_factory=dict)
    draft_tau: dict[int, float] = field(default_factory=dict)  # T_d(n) / T_d(1), DRAFT_POINTS
    noise: float | None = None  # median relative spread between passes (or warm-up and pass)
    passes: int = 0
    measured: bool = True  # False: guessed from the files (`prior`), never cached

    @property
    def c(self) -> float | None:
        return None if self.draft_step_s is None else self.draft_step_s / self.target_step_s

    def dips(self) -> list[int]:
        """The n where verifying n tokens is cheaper than n - 1 by more than the noise."""
        margin = 1.0 + 2 * (self.noise or 0.0)
        points = sorted(self.tau)
        return [
            n
            for prev, n in itertools.pairwise(points)
            if n == prev + 1 and self.tau[n] * margin < self.tau[prev]
        ]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Calibration:
        tau = {int(n): float(v) for n, v in doc["tau"].items()}
        draft = doc.get("draft_step_s")
        times = [*tau.values(), float(doc["target_step_s"]), float(draft or 1.0)]
        if 1 not in tau or not all(math.isfinite(v) and v > 0 for v in times):
            raise ValueError("incomplete calibration, or timings that are not positive numbers")
        noise = doc.get("noise")
        return cls(
            float(doc["target_step_s"]),
            tau,
            None if draft is None else float(draft),
            float(doc.get("seconds", 0.0)),
            dict(doc.get("key", {})),
            {int(n): float(v) for n, v in doc.get("draft_tau", {}).items()},
            None if noise is None else float(noise),
            int(doc.get("passes", 0)),
        )


@dataclass(frozen=True)
class _Measured:
    seconds: dict[int, float]  # median per size
    spread: float  # median over sizes of (max - min) / median; of one pass, with the warm-up
    passes: int


def affordable(
    sizes: Sequence[int], core: Sequence[int], tau_top: float, budget_steps: float, passes: int
) -> list[int]:
    """All of `sizes` where `passes` passes fit the budget (costs on a line from tau(1) = 1 to
    `tau_top`, the largest size's), else those in `core`."""
    top = max(sizes)
    estimate = sum(1 + (tau_top - 1) * (n - 1) / max(top - 1, 1) for n in sizes)
    return list(sizes) if passes * estimate <= budget_steps else [n for n in sizes if n in core]


def _batch_costs(
    model: Model,
    context: Sequence[int],
    sizes: Sequence[int],
    budget_steps: float,
    passes: tuple[int, int],
    core: Sequence[int] | None = None,
) -> _Measured:
    """Seconds to decode n tokens (logits for all n) after `context`, per n, in interleaved
    passes within the budget (in this model's steps). Each size runs once untimed first: a GPU
    backend compiles or allocates on a shape's first use, which made a flat curve look steep."""
    model.rewind(0)
    model.decode(list(context), 0)
    base = model.n_past
    probe = list(context) * (max(sizes) // max(len(context), 1) + 1)

    def run(n: int) -> float:
        t = perf_counter()
        model.decode(probe[:n], n)
        model.rewind(base)
        return perf_counter() - t

    cold = {1: run(1)}  # the first run of each size, untimed (kept for the spread of one pass)
    step = statistics.median([cold[1], run(1), run(1)])
    start = perf_counter()
    if core is not None:
        # The largest batch, warm, prices the others: all are measured where two passes fit.
        top = max(sizes)
        cold[top] = run(top)
        sizes = affordable(sizes, core, run(top) / step, budget_steps, max(passes[0], 2))
    cold |= {n: run(n) for n in sizes if n not in cold}
    times = _passes(run, sizes, passes, budget_steps * step - (perf_counter() - start))
    model.rewind(0)
    seconds = {n: statistics.median(ts) for n, ts in times.items()}
    spread = statistics.median(
        (max(ts) - min(ts)) / statistics.median(ts)
        for ts in (ts if len(ts) > 1 else [cold[n], *ts] for n, ts in times.items())
    )
    return _Measured(seconds, spread, len(times[1]))


def _passes(
    run: Callable[[int], float], sizes: Sequence[int], passes: tuple[int, int], budget_s: float
) -> dict[int, list[float]]:
    """Timings of each size: `passes[0]` passes, then more (up to `passes[1]`) while the next
    fits in `budget_s`; alternating direction, so that drift hits every size alike."""
    times: dict[int, list[float]] = {n: [] for n in sizes}
    start = perf_counter()
    done = 0
    while True:
        for n in sizes if done % 2 == 0 else reversed(sizes):
            times[n].append(run(n))
        done += 1
        spent = perf_counter() - start
        if done >= passes[1] or (done >= passes[0] and spent / done * (done + 1) > budget_s):
            return times


def calibrate(
    target: Model,
    draft: Model | None,
    context: Sequence[int],
    *,
    max_n: int = 32,
    passes: tuple[int, int] | None = None,
    gpu: bool = False,
) -> Calibration:
    """Measure the target's tau(n) and step and the draft's, within the budget. `gpu`: the
    models compute on a GPU (at least GPU_MIN_PASSES passes); `passes` overrides it."""
    start = perf_counter()
    passes = passes or (GPU_MIN_PASSES if gpu else MIN_PASSES, MAX_PASSES)
    context = list(context)[:CONTEXT_TOKENS]
    sizes = [n for n in TAU_POINTS if n <= max_n]
    target_m = _batch_costs(target, context, sizes, BUDGET_STEPS, passes, TAU_CORE)
    t1 = target_m.seconds[1]
    draft_s, draft_tau = None, {}
    if draft is not None:
        sizes_d = [n for n in DRAFT_POINTS if n <= len(context)]
        draft_m = _batch_costs(draft, context, sizes_d, BUDGET_STEPS / 4, passes)
        draft_s = draft_m.seconds[1]
        draft_tau = {n: v / draft_s for n, v in draft_m.seconds.items()}
    return Calibration(
        t1,
        {n: v / t1 for n, v in target_m.seconds.items()},
        draft_s,
        perf_counter() - start,
        {},
        draft_tau,
        target_m.spread,
        target_m.passes,
    )


def prior(target_bytes: int, draft_bytes: int | None) -> Calibration:
    """This device's costs guessed from the model files' sizes, before anything is measured."""
    step = target_bytes / PRIOR_BYTES_PER_S
    tau = {n: 1.0 + PRIOR_TAU_SLOPE * (n - 1) for n in TAU_CORE}
    if draft_bytes is None:
        return Calibration(step, tau, measured=False)
    draft_tau = {n: 1.0 + PRIOR_TAU_SLOPE * (n - 1) for n in DRAFT_POINTS}
    draft_step = step * draft_bytes / target_bytes
    return Calibration(step, tau, draft_step, draft_tau=draft_tau, measured=False)


def cache_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def load_cached(directory: Path, key: str) -> Calibration | None:
    """The cached calibration, or None if absent or unreadable (a corrupt file is ignored)."""
    doc = cachefile.read(directory / f"{key}.json")
    try:
        return Calibration.from_json(doc)  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def save(directory: Path, key: str, calibration: Calibration) -> bool:
    """Keep the calibration; False when the cache folder cannot be written (warned once)."""
    # JSON writes the int keys of tau and draft_tau as strings; from_json reads them back.
    return cachefile.write(directory / f"{key}.json", asdict(calibration))
