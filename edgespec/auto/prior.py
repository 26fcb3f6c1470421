"""What the calibration measured, in target steps: the prior of `LearnedCosts` (costs.py)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens a round of K drafts accepted at rate alpha gives, the target's own included."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class CostModel:
    """tau(n) = T(n)/T(1), verifying n tokens in one pass, measured at some n."""

    tau_points: Mapping[int, float]
    c: float  # draft step / target step (0 for n-gram lookup)
    overhead: float = 0.0  # per round, in target steps
    _memo: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if 1 not in self.tau_points:
            raise ValueError("tau(1) must be measured")

    def tau(self, n: int) -> float:
        if n not in self._memo:
            self._memo[n] = self._interpolate(n)
        return self._memo[n]

    def _interpolate(self, n: int) -> float:
        points = sorted(self.tau_points)
        if n in self.tau_points:
            return self.tau_points[n]
        if n > points[-1]:
            if len(points) == 1:
                return self.tau_points[1] * n  # nothing measured: assume no batching gain
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
