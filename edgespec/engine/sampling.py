"""One sampling policy for plain and speculative decoding alike.

The processed distribution p is what plain decoding samples from; speculative verification uses
exactly the same p, which is what keeps it lossless. Order: temperature, then top-k, top-p and
min-p on the tempered distribution (as Hugging Face's logits warpers do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgespec.errors import ConfigError

# Below this, logits / temperature overflow to inf (1e-320 gave NaN probabilities), and the
# distribution is the argmax anyway: such temperatures decode greedily.
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    min_p: float = 0.0  # 0: off
    seed: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top-k must be >= 0 (0 turns it off), got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (0 <= self.min_p < 1):
            raise ConfigError(f"min-p must be in [0, 1), got {self.min_p}")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ConfigError(f"--seed must be in [0, 2^64), got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


class Sampler:
    """Turns a row of logits into the processed distribution and draws from it."""

    def __init__(self, params: SamplingParams, rng: np.random.Generator | None = None) -> None:
        self.params = params
        self.rng = rng if rng is not None else np.random.default_rng(params.seed)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The processed distribution over the whole vocabulary (float64, zeros outside)."""
        logits = np.asarray(logits, dtype=np.float64)
        n = logits.shape[-1]
        if self.params.greedy:
            out = np.zeros(n)
            out[int(np.argmax(logits))] = 1.0
            return out
        scaled = logits / self.params.temperature
        idx = np.arange(n)
        if 0 < self.params.top_k < n:
            idx = np.argpartition(-scaled, self.params.top_k - 1)[: self.params.top_k]
        vals = scaled[idx]
        # Descending by logit, ties by token id, so the cut-offs below are deterministic.
        order = np.lexsort((idx, -vals))
        idx, vals = idx[order], vals[order]
        p = np.exp(vals - vals[0])
        p /= p.sum()
        keep = len(p)
        if self.params.top_p < 1.0:
            # Smallest prefix whose mass reaches top_p (always at least one token).
            keep = min(
                keep, int(np.searchsorted(np.cumsum(p), self.params.top_p * (1 - 1e-12))) + 1
            )
        if self.params.min_p > 0.0:
            keep = min(keep, int(np.count_nonzero(p >= self.params.min_p * p[0])))
        out = np.zeros(n)
        out[idx[:keep]] = p[:keep]
        out /= out.sum()
        return out

    def draw(self, probs: np.ndarray) -> int:
        """Inverse-CDF draw; one uniform number per token keeps seeded runs reproducible."""
        cdf = np.cumsum(probs)
        u = self.rng.random() * cdf[-1]
        return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))
