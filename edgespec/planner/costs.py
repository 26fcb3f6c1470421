"""The cost model that decides K.

One round with K drafted tokens costs K*c + tau(K+1) + o target steps (c: one draft step /
one target step; tau(n) = T(n)/T(1), the cost of verifying n tokens in one pass; o: fixed
overhead per round) and yields E(K) = (1 - a^(K+1)) / (1 - a) tokens on average, for a
per-token acceptance a. The speed relative to plain decoding is S(K) = E(K) / cost(K), and K = 0
(plain decoding, S = 1 / (1 + o)) wins whenever nothing beats it.
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
    chosen only among the measured lengths."""

    tau_points: Mapping[int, float]
    c: float  # draft step / target step (0 for n-gram lookup)
    overhead: float = 0.0  # per round, in target steps

    def __post_init__(self) -> None:
        if 1 not in self.tau_points:
            raise ValueError("tau(1) must be measured")
        # best_k runs every round: memoise it (and tau) on the frozen instance.
        object.__setattr__(self, "_tau_memo", {})
        object.__setattr__(self, "_best_memo", {})

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

    def round_cost(self, k: int, c: float | None = None) -> float:
        return k * (self.c if c is None else c) + self.tau(k + 1) + self.overhead

    def speed(self, k: int, alpha: float, c: float | None = None) -> float:
        """S(K): tokens per target step, relative to plain decoding's 1 / (1 + o)."""
        plain = 1.0 / (self.tau(1) + self.overhead)
        return expected_tokens(alpha, k) / self.round_cost(k, c) / plain

    def best_k(self, alpha: float, k_max: int, c: float | None = None) -> tuple[int, float]:
        """The K in 0..k_max with the highest expected speed, and that speed."""
        key = (round(alpha, 4), k_max, c)
        memo: dict[tuple[float, int, float | None], tuple[int, float]] = self._best_memo  # type: ignore[attr-defined]
        if key not in memo:
            memo[key] = self._search(alpha, k_max, c)
        return memo[key]

    def _search(self, alpha: float, k_max: int, c: float | None) -> tuple[int, float]:
        best = (0, 1.0)
        for k in self.choices(k_max):
            s = self.speed(k, alpha, c)
            if s > best[1] + 1e-12:
                best = (k, s)
        return best
