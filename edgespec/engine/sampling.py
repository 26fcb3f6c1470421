"""The processed distribution p plain decoding samples from and verification checks against
(which keeps it lossless): temperature, then top-k, top-p and min-p, as Hugging Face's."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgespec.errors import ConfigError

# Below this, logits / temperature overflow (1e-320 gave NaN) and the distribution is the
# argmax anyway: such temperatures decode greedily.
GREEDY_BELOW = 1e-5
# Top-p's and top-k's first candidates, relative to the likeliest (one comparison, not a
# partition), lowered a hundredfold while too few: it changes the time taken, not the tokens.
TOP_P_FLOOR = 1e-2
# A cut-off decided on float32 terms (relative error about 1e-6) is decided again on float64
# ones where its mass, or one token fewer's, is this close to top-p, relative.
CUT_MARGIN = 1e-4
# A draft's proposal and greedy confidence leave out the tokens less likely than this relative
# to the likeliest: a guess, checked afterwards (docs/tuning.md, Draft proposals).
PROPOSAL_FLOOR = 1e-4
_LOG2E = math.log2(math.e)
# Terms summed in float32 (by a matrix-vector product) before float64 takes over: 127
# roundings at most, 8e-6 relative, under CUT_MARGIN.
_SUM_ROW = 128
_ONES = np.ones(_SUM_ROW, dtype=np.float32)
_ONES.flags.writeable = False


@dataclass(frozen=True, kw_only=True)
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


class Dist:
    """A processed distribution held by its support (ascending ids) and their float64 values,
    indexed like the dense row it stands for: a dense row is a large allocation every token."""

    __slots__ = ("n", "support", "values")

    def __init__(self, n: int, support: np.ndarray, values: np.ndarray) -> None:
        self.n = n
        self.support = support
        self.values = values

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, ids: int | np.integer | np.ndarray) -> Any:
        if ids is self.support:
            return self.values
        if isinstance(ids, (int, np.integer)):
            i = int(np.searchsorted(self.support, ids))
            found = i < len(self.support) and self.support[i] == ids
            return float(self.values[i]) if found else 0.0
        wanted = np.asarray(ids)
        at = np.minimum(np.searchsorted(self.support, wanted), len(self.support) - 1)
        return np.where(self.support[at] == wanted, self.values[at], 0.0)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.n)
        out[self.support] = self.values
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype)


Row = np.ndarray | Dist


def support_of(probs: Row) -> np.ndarray:
    if isinstance(probs, Dist):
        return probs.support
    return np.flatnonzero(probs > 0)


def _exp2_total(logits: np.ndarray, m: float, scale: float, out: np.ndarray) -> float:
    """The sum of 2^((logit - m) * scale), `m` the row's largest logit, in float32 terms in
    `out`. Where 0 <= m * scale <= 100 the unshifted terms neither overflow nor underflow more
    than the shifted ones, so the shift applies to the sum (a pass fewer)."""
    shift = m * scale
    if 0.0 <= shift <= 100.0:
        np.multiply(logits, np.float32(scale), out=out, casting="unsafe")
    else:
        np.subtract(logits, m, out=out, casting="unsafe")
        np.multiply(out, np.float32(scale), out=out)
        shift = 0.0
    np.exp2(out, out=out)
    rows = len(out) // _SUM_ROW
    total = float(out[: rows * _SUM_ROW].reshape(rows, _SUM_ROW).dot(_ONES).sum(dtype=np.float64))
    total += float(out[rows * _SUM_ROW :].sum(dtype=np.float64))
    return total * 2.0**-shift


class Sampler:
    def __init__(self, params: SamplingParams, rng: np.random.Generator | None = None) -> None:
        self.params = params
        self.rng = rng if rng is not None else np.random.default_rng(params.seed)
        # A row's weights, reused: a fresh array a row costs page faults.
        self._scratch = np.empty(0, dtype=np.float32)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def probs(self, logits: np.ndarray) -> np.ndarray:
        return self.dist(logits).dense()

    def dist(self, logits: np.ndarray) -> Dist:
        logits = np.asarray(logits)
        n = logits.shape[-1]
        if self.params.greedy:
            return Dist(n, np.array([int(np.argmax(logits))]), np.ones(1))
        cut = self.params.top_k > 0 or self.params.top_p < 1.0 or self.params.min_p > 0.0
        if not cut:
            scaled = logits.astype(np.float64) / self.params.temperature
            weights = np.exp(scaled - scaled.max())
            return Dist(n, np.arange(n), weights / weights.sum())
        m = float(logits.max())
        ids = self._top_k(logits, m) if 0 < self.params.top_k < n else self._top_p(logits, m)
        return self._min_p(logits, ids, m)

    def proposal(self, logits: np.ndarray) -> Dist:
        """What a draft samples from: the processed distribution of the tokens at least
        `PROPOSAL_FLOOR` as likely as the likeliest. Verification is exact whatever q a draft is
        drawn from, checked against that q; leaving the tail out spares a pass over the row."""
        logits = np.asarray(logits)
        if self.params.greedy or self.params.top_k > 0:
            return self.dist(logits)
        m = float(logits.max())
        cand = self._above(logits, m, PROPOSAL_FLOOR)
        ids = cand
        if self.params.top_p < 1.0:
            ids = self._top_p_among(logits, cand)
        return self._min_p(logits, ids, m)

    def _min_p(self, logits: np.ndarray, ids: np.ndarray, m: float) -> Dist:
        """`ids` past min-p, normalised: the distribution `dist` and `proposal` return."""
        if self.params.min_p > 0.0:  # p >= min_p * p_max: weights >= min_p
            ids = ids[self._exact(logits[ids], m) >= self.params.min_p]
        kept = self._exact(logits[ids], m)
        return Dist(logits.shape[-1], ids, kept / kept.sum())

    def _exact(self, logits: np.ndarray, m: float) -> np.ndarray:
        t = self.params.temperature
        return np.exp(logits.astype(np.float64) / t - m / t)

    def _above(self, logits: np.ndarray, m: float, weight: float) -> np.ndarray:
        if weight <= 0.0:
            return np.arange(logits.shape[-1])
        return np.flatnonzero(logits > m + self.params.temperature * math.log(weight))

    def _candidates(
        self, logits: np.ndarray, m: float, enough: Callable[[np.ndarray], bool]
    ) -> np.ndarray:
        floor = TOP_P_FLOOR
        while True:
            ids = self._above(logits, m, floor)
            if floor == 0.0 or enough(ids):
                return ids
            floor = floor * 1e-2 if floor > 1e-30 else 0.0

    def _top_k(self, logits: np.ndarray, m: float) -> np.ndarray:
        """The top_k likeliest tokens (ascending; ties: the lowest ids), then top-p among them."""
        k = self.params.top_k
        cand = self._candidates(logits, m, lambda ids: len(ids) >= k)
        vals = logits[cand]
        kth = np.partition(vals, len(vals) - k)[len(vals) - k]
        above = cand[vals > kth]
        ids = np.sort(np.concatenate([above, cand[vals == kth][: k - len(above)]]))
        return ids if self.params.top_p >= 1.0 else self._top_p_among(logits, ids)

    def _top_p_among(self, logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Top-p among `ids` on their own mass."""
        vals = logits[ids]
        order = np.lexsort((ids, -vals))
        p = self._exact(vals[order], float(vals.max()))
        return np.sort(ids[order[: self._top_p_keep(p / p.sum())]])

    def _top_p(self, logits: np.ndarray, m: float) -> np.ndarray:
        """The smallest prefix (by logit, ties by id) whose share of all the mass reaches top_p."""
        top_p = self.params.top_p
        if top_p >= 1.0:  # min-p alone: its exact cut follows
            return self._above(logits, m, self.params.min_p * (1 - CUT_MARGIN))
        total = self._total(logits, m)
        wanted = top_p * total * (1 + CUT_MARGIN)
        cand = self._candidates(logits, m, lambda ids: self._exact(logits[ids], m).sum() >= wanted)
        ranked = np.sort(logits[cand])[::-1]
        exact = self._exact(ranked, m)
        mass = np.cumsum(exact) / total
        keep = self._top_p_keep_mass(mass)
        near = np.abs(mass[max(keep - 2, 0) : keep] / top_p - 1.0)
        if (near.size and near.min() < CUT_MARGIN) or mass[-1] < top_p:
            # Too close to call on float32 terms: float64 over the whole row.
            whole = self._exact(logits, m)
            keep = self._top_p_keep(exact / whole.sum())
        edge = ranked[min(keep, len(ranked)) - 1]
        vals = logits[cand]
        kept = vals > edge
        tied = np.flatnonzero(vals == edge)  # ties with the last: the lowest ids
        kept[tied[: keep - np.count_nonzero(kept)]] = True
        return cand[kept]

    def _total(self, logits: np.ndarray, m: float) -> float:
        n = logits.shape[-1]
        if len(self._scratch) != n:
            self._scratch = np.empty(n, dtype=np.float32)
        return _exp2_total(logits, m, _LOG2E / self.params.temperature, self._scratch)

    def _top_p_keep(self, p_sorted: np.ndarray) -> int:
        return self._top_p_keep_mass(np.cumsum(p_sorted))

    def _top_p_keep_mass(self, mass: np.ndarray) -> int:
        return int(np.searchsorted(mass, self.params.top_p * (1 - 1e-12))) + 1

    def draw(self, probs: Row) -> int:
        """Inverse-CDF draw, one uniform number per token (seeded runs reproduce), over the
        support only: the same token as over the whole row (zeros change no partial sum)."""
        support = support_of(probs)
        return self.draw_among(support, probs[support])

    def draw_among(self, support: np.ndarray, weights: np.ndarray) -> int:
        cdf = np.cumsum(weights)
        u = self.rng.random() * cdf[-1]
        return int(support[min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)])
