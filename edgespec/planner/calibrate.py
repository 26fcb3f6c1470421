"""Calibration: measure on this device what a target step, a verification of n tokens and a
draft step cost, in a few seconds, and keep the result on disk."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from edgespec import cachefile
from edgespec.engine.protocol import Model

# Verification lengths measured; the cost model interpolates in between. llama.cpp's CPU
# kernels change at some batch sizes (here tau(8) ~ tau(7) and tau(16) ~ tau(12)), so the
# points are dense up to 8 and then follow the powers of two.
TAU_POINTS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32)
CONTEXT_TOKENS = 256  # a realistic KV length to measure at
REPEATS = 3


@dataclass(frozen=True)
class Calibration:
    target_step_s: float
    tau: dict[int, float]
    draft_step_s: float | None = None  # None: no draft model was measured
    seconds: float = 0.0  # how long the calibration took
    key: dict[str, Any] = field(default_factory=dict)

    @property
    def c(self) -> float | None:
        return None if self.draft_step_s is None else self.draft_step_s / self.target_step_s

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["tau"] = {str(n): v for n, v in self.tau.items()}
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Calibration:
        tau = {int(n): float(v) for n, v in doc["tau"].items()}
        draft = doc.get("draft_step_s")
        times = [*tau.values(), float(doc["target_step_s"]), float(draft or 1.0)]
        if 1 not in tau or not all(math.isfinite(v) and v > 0 for v in times):
            raise ValueError("incomplete calibration, or timings that are not positive numbers")
        return cls(
            float(doc["target_step_s"]),
            tau,
            None if draft is None else float(draft),
            float(doc.get("seconds", 0.0)),
            dict(doc.get("key", {})),
        )


def _median_time(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = perf_counter()
        fn()
        times.append(perf_counter() - t)
    return statistics.median(times)


def _step_costs(
    model: Model, context: Sequence[int], sizes: Sequence[int], repeats: int
) -> dict[int, float]:
    """Seconds to decode n tokens (with logits for all n) after `context`, for each n."""
    model.rewind(0)
    model.decode(list(context), 0)
    base = model.n_past
    probe = list(context) * (max(sizes) // max(len(context), 1) + 1)

    def run(n: int) -> None:
        model.decode(probe[:n], n)
        model.rewind(base)

    run(1)  # warm-up: first-use allocations
    costs = {n: _median_time(lambda n=n: run(n), repeats) for n in sizes}  # type: ignore[misc]
    model.rewind(0)
    return costs


def calibrate(
    target: Model,
    draft: Model | None,
    context: Sequence[int],
    *,
    max_n: int = 32,
    repeats: int = REPEATS,
) -> Calibration:
    start = perf_counter()
    context = list(context)[:CONTEXT_TOKENS]
    sizes = [n for n in TAU_POINTS if n <= max_n]
    costs = _step_costs(target, context, sizes, repeats)
    t1 = costs[1]
    draft_s = None
    if draft is not None:
        draft_s = _step_costs(draft, context, [1], repeats + 2)[1]
    return Calibration(t1, {n: costs[n] / t1 for n in sizes}, draft_s, perf_counter() - start)


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
    return cachefile.write(directory / f"{key}.json", calibration.to_json())
