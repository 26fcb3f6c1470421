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
# Top-p sorts only so many of the likeliest tokens where its cut falls among them, the fewer
# first (a guess: a nucleus of 0.95 at temperature 0.7 is tens of tokens in most rows of an
# answer); a flatter distribution sorts the whole vocabulary.
TOP_P_CANDIDATES = (1024, 16384)
# Before those: the tokens at least this likely relative to the likeliest, found without a
# partition of the whole vocabulary (1.3 ms of a 4 ms row at temperature 0.7); a guess, wide
# enough that they hold a nucleus of 0.95 in most rows of an answer.
TOP_P_FLOOR = 1e-6


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    min_p: float = 0.0  # 0: off
    seed: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ConfigError(
                f"temperature must be >= 0, got {self.temperature}", field="temperature"
            )
        if self.top_k < 0:
            raise ConfigError(
                f"top-k must be >= 0 (0 turns it off), got {self.top_k}", field="top_k"
            )
        if not (0 < self.top_p <= 1):
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}", field="top_p")
        if not (0 <= self.min_p < 1):
            raise ConfigError(f"min-p must be in [0, 1), got {self.min_p}", field="min_p")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ConfigError(f"--seed must be in [0, 2^64), got {self.seed}", field="seed")

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
        if 0 < self.params.top_k < n:
            return self._sorted_cut(scaled, self._top_k(scaled))
        # Without top-k nothing needs sorting but top-p's cut: a sort of the whole 152k
        # vocabulary cost 22 ms, a fifth of a target step, for every row sampled or verified.
        weights = np.exp(scaled - scaled.max())  # the likeliest token weighs 1
        if self.params.top_p < 1.0:
            weights = self._top_p(scaled, weights)
        if self.params.min_p > 0.0:  # min-p keeps p >= min_p * p_max: weights >= min_p
            weights[weights < self.params.min_p] = 0.0
        return weights / weights.sum()

    def _top_k(self, scaled: np.ndarray) -> np.ndarray:
        """The top_k likeliest tokens; among tokens as likely as the k-th, the lowest ids."""
        k = self.params.top_k
        kth = np.partition(scaled, len(scaled) - k)[len(scaled) - k]
        above = np.flatnonzero(scaled > kth)
        return np.concatenate([above, np.flatnonzero(scaled == kth)[: k - len(above)]])

    def _top_p(self, scaled: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """`weights` but zero outside the smallest prefix (by logit, ties by token id) whose
        share of all the mass reaches top_p. Only the likeliest tokens are sorted where the cut
        falls among them: those above TOP_P_FLOOR, else those strictly above every other
        token's logit (TOP_P_CANDIDATES); else all of them."""
        order = None
        total = weights.sum()
        # The tokens above the floor are the head of the order, each likelier than any other:
        # where their mass reaches top_p the cut falls among them.
        likely = np.flatnonzero(weights > TOP_P_FLOOR)
        if len(likely) <= TOP_P_CANDIDATES[0]:
            likely = likely[np.lexsort((likely, -scaled[likely]))]
            keep = self._top_p_keep(weights[likely] / total)
            if keep <= len(likely):
                order = likely[:keep]
        for m in (c for c in TOP_P_CANDIDATES if order is None and c + 1 < len(scaled)):
            top = np.argpartition(-scaled, m)[: m + 1]
            top = top[np.lexsort((top, -scaled[top]))]
            keep = self._top_p_keep(weights[top[:-1]] / total)
            # top[-1]: the likeliest token left out, or as likely as any left out
            if keep < m and scaled[top[keep - 1]] > scaled[top[-1]]:
                order = top[:keep]
                break
        if order is None:
            everything = np.lexsort((np.arange(len(scaled)), -scaled))
            order = everything[: self._top_p_keep(weights[everything] / total)]
        out = np.zeros_like(weights)
        out[order] = weights[order]
        return out

    def _top_p_keep(self, p_sorted: np.ndarray) -> int:
        """How many of these tokens (sorted, each with its share of all the mass) top-p keeps:
        the smallest prefix whose mass reaches top_p, at least one."""
        mass = np.cumsum(p_sorted)
        return int(np.searchsorted(mass, self.params.top_p * (1 - 1e-12))) + 1

    def _sorted_cut(self, scaled: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Top-p and min-p among the tokens `idx` (top-k's), by logit (ties by token id, so
        that the cut-offs are deterministic); zeros elsewhere."""
        vals = scaled[idx]
        order = np.lexsort((idx, -vals))
        idx, vals = idx[order], vals[order]
        p = np.exp(vals - vals[0])
        p /= p.sum()
        keep = len(p)
        if self.params.top_p < 1.0:
            keep = min(keep, self._top_p_keep(p))
        if self.params.min_p > 0.0:
            keep = min(keep, int(np.count_nonzero(p >= self.params.min_p * p[0])))
        out = np.zeros(len(scaled))
        out[idx[:keep]] = p[:keep]
        return out / out.sum()

    def draw(self, probs: np.ndarray) -> int:
        """Inverse-CDF draw; one uniform number per token keeps seeded runs reproducible.

        The CDF is summed over the tokens with a probability only: a cumulative sum of the
        whole 152k vocabulary cost 0.56 ms a draw, most of a draft step's Python at T > 0,
        where top-p leaves a few dozen. The draw is the same token as over the whole row
        (adding zeros changes no partial sum, and the first sum above u is a token's own)."""
        support = np.flatnonzero(probs > 0)
        cdf = np.cumsum(probs[support])
        u = self.rng.random() * cdf[-1]
        return int(support[min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)])
