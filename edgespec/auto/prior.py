"""What the calibration measured, in target steps: the prior of the one cost model.

tau(n) = T(n)/T(1) is the cost of verifying n tokens in one pass, c one draft step / one target
step, o the fixed overhead per round. A round that drafts K tokens accepted at a per-token rate
a yields E(K) = (1 - a^(K+1)) / (1 - a) tokens on average. What a round costs, and so which K
pays, is `costs.py`'s `LearnedCosts`: these numbers are its prior, and the plan asks it
before anything is loaded (with a target step of 1, costs in target steps).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass


def expected_tokens(alpha: float, k: int) -> float:
    """E(K; a): tokens per round, accepted draft tokens plus the target's own."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class CostModel:
    """tau(n) measured at some n (1 always among them), interpolated linearly in between; K is
    chosen only among the measured lengths (`choices`)."""

    tau_points: Mapping[int, float]
    c: float  # draft step / target step (0 for n-gram lookup)
    overhead: float = 0.0  # per round, in target steps

    def __post_init__(self) -> None:
        if 1 not in self.tau_points:
            raise ValueError("tau(1) must be measured")
        # tau is read several times every round: memoise it on the frozen instance.
        object.__setattr__(self, "_tau_memo", {})

    def tau(self, n: int) -> float:
        memo: dict[int, float] = self._tau_memo  # type: ignore[attr-defined]
        if n not in memo:
            memo[n] = self._interpolate(n)
        return memo[n]

    def _interpolate(self, n: int) -> float:
        points = sorted(self.tau_points)
        if n in self.tau_points:
            return self.tau_points[n]
        if n > points[-1]:
            if len(points) == 1:
                return self.tau_points[1] * n  # nothing measured: assume no batching gain
            # Past the last measurement, grow at the last measured slope (never flatter than 0).
            a, b = points[-2], points[-1]
            slope = max(0.0, (self.tau_points[b] - self.tau_points[a]) / (b - a))
            return self.tau_points[b] + slope * (n - b)
        i = bisect_left(points, n)
        lo, hi = points[i - 1], points[i]
        w = (n - lo) / (hi - lo)
        return self.tau_points[lo] * (1 - w) + self.tau_points[hi] * w

    def choices(self, limit: int) -> list[int]:
        """The draft lengths K in 1..limit whose verification (K + 1 tokens) was measured."""
        return [n - 1 for n in sorted(self.tau_points) if 2 <= n <= limit + 1]
