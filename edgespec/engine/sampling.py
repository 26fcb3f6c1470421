"""One sampling policy for plain and speculative decoding alike.

The processed distribution p is what plain decoding samples from; speculative verification uses
exactly the same p, which is what keeps it lossless. Order: temperature, then top-k, top-p and
min-p on the tempered distribution (as Hugging Face's logits warpers do).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgespec.errors import ConfigError

# Below this, logits / temperature overflow to inf (1e-320 gave NaN probabilities), and the
# distribution is the argmax anyway: such temperatures decode greedily.
GREEDY_BELOW = 1e-5
# The candidates for top-p and top-k: the tokens at least this likely relative to the likeliest
# (found by one comparison over the vocabulary, 25 us, where a partition of all 152k logits
# took 1.6 ms), the floor lowered a hundredfold while they hold too little mass or too few
# tokens. Most rows of an answer at temperature 0.7 / top-p 0.95 are done at the first floor;
# a flat row sorts tens of thousands of candidates (milliseconds, as before).
TOP_P_FLOOR = 1e-2
# A cut-off decided on the fast normaliser (float32 terms: relative error about 1e-6) stands
# unless the mass it leaves or the mass one token fewer leaves is this close to top-p, relative;
# then it is decided again on float64 terms, as exactly as before.
CUT_MARGIN = 1e-4
# A draft's proposal (`Sampler.proposal`) and the head its greedy confidence is read from
# (`drafters.top_one`, `top_two`) leave out the tokens less likely than this relative to its
# likeliest.
# A guess (the sampler's second candidate floor), not tuned: checked afterwards on the real
# pair, 4 prompts (benchmarks/overhead/proposal_rows.py): the acceptance chance unchanged at
# 0.7947, a greedy confidence at most 4.3 % high.
PROPOSAL_FLOOR = 1e-4
_LOG2E = math.log2(math.e)
# Terms summed in float32 before float64 takes over (`_exp2_total`): 127 roundings at most,
# 8e-6 relative, well under CUT_MARGIN; a matrix-vector product over rows this long took half
# the time of numpy's pairwise float32 sum of 152k terms (13 against 25 us, this EPYC).
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
    """A processed distribution held by its support: `support`, the ids of its tokens with a
    probability (ascending), and `values`, theirs (float64). Indexed like the dense row it
    stands for (an id or an array of ids; zero outside the support), `len` the vocabulary's
    size. The engine reads a few dozen entries of each row; a dense float64 row of 152k tokens
    cost a 1.2 MB zeroed allocation (about 45 us) a draft step and a verified token."""

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


# A processed distribution over the vocabulary, dense or held by its support.
Row = np.ndarray | Dist


def support_of(probs: Row) -> np.ndarray:
    """The ids of the tokens with a probability (ascending)."""
    if isinstance(probs, Dist):
        return probs.support
    return np.flatnonzero(probs > 0)


def _exp2_total(logits: np.ndarray, m: float, scale: float, out: np.ndarray) -> float:
    """The sum over the row of 2^((logit - m) * scale), `m` the row's largest logit: every
    token's weight relative to the likeliest (the softmax's denominator at temperature
    log2(e) / scale). Float32 terms computed in `out` (a row's size, reused), three passes:
    the product, exp2 and the sum. Where 0 <= m * scale <= 100, 2^(logit * scale) neither
    overflows nor loses more to underflow than the relative terms do, and the shift by m is
    applied to the sum instead of to every term (a pass fewer). The sum runs in rows of 128
    terms by a matrix-vector product, those sums added in float64: any order of adding 128
    positive terms errs by at most 127 float32 roundings (8e-6 relative, under `CUT_MARGIN`),
    in half the time numpy's pairwise sum of float32 takes."""
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
    """Turns a row of logits into the processed distribution and draws from it."""

    def __init__(self, params: SamplingParams, rng: np.random.Generator | None = None) -> None:
        self.params = params
        self.rng = rng if rng is not None else np.random.default_rng(params.seed)
        # Room for the weights of a row, reused: a fresh 600 kB array a row cost page faults.
        self._scratch = np.empty(0, dtype=np.float32)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The processed distribution over the whole vocabulary (float64, zeros outside)."""
        return self.dist(logits).dense()

    def dist(self, logits: np.ndarray) -> Dist:
        """The processed distribution, held by its support (what the engine samples and
        verifies with)."""
        logits = np.asarray(logits)
        n = logits.shape[-1]
        if self.params.greedy:
            return Dist(n, np.array([int(np.argmax(logits))]), np.ones(1))
        cut = self.params.top_k > 0 or self.params.top_p < 1.0 or self.params.min_p > 0.0
        if not cut:  # every token keeps a probability: the whole row, in float64
            scaled = logits.astype(np.float64) / self.params.temperature
            weights = np.exp(scaled - scaled.max())
            return Dist(n, np.arange(n), weights / weights.sum())
        m = float(logits.max())
        ids = self._top_k(logits, m) if 0 < self.params.top_k < n else self._top_p(logits, m)
        if self.params.min_p > 0.0:  # min-p keeps p >= min_p * p_max: weights >= min_p
            ids = ids[self._exact(logits[ids], m) >= self.params.min_p]
        kept = self._exact(logits[ids], m)
        return Dist(n, ids, kept / kept.sum())

    def proposal(self, logits: np.ndarray) -> Dist:
        """What a draft model samples its tokens from: the processed distribution of the
        tokens at least `PROPOSAL_FLOOR` as likely as the likeliest, as if the rest of the row
        were not there (top-p's share is of their mass, not of the whole row's).

        Verification is exact whatever distribution a draft token is drawn from, as long as it
        is checked against that same distribution (Leviathan et al. 2022: q is arbitrary);
        only the target's distribution must be the processed one exactly. Leaving the far
        tail out spares the pass over the whole row that the exact normaliser needs (half a
        sampled row's time at 152k tokens) and costs tokens that the draft would draw less
        than once in 10,000 (each), which the target then draws from its residual instead."""
        logits = np.asarray(logits)
        if self.params.greedy or self.params.top_k > 0:  # top-k needs no normaliser
            return self.dist(logits)
        m = float(logits.max())
        cand = self._above(logits, m, PROPOSAL_FLOOR)
        ids = cand
        if self.params.top_p < 1.0:
            ids = self._top_p_among(logits, cand)
        if self.params.min_p > 0.0:
            ids = ids[self._exact(logits[ids], m) >= self.params.min_p]
        kept = self._exact(logits[ids], m)
        return Dist(logits.shape[-1], ids, kept / kept.sum())

    def _exact(self, logits: np.ndarray, m: float) -> np.ndarray:
        """float64 weights, the likeliest token's 1 (the arithmetic of the whole-row path)."""
        t = self.params.temperature
        return np.exp(logits.astype(np.float64) / t - m / t)

    def _above(self, logits: np.ndarray, m: float, weight: float) -> np.ndarray:
        """The tokens whose weight relative to the likeliest is above `weight` (ascending
        ids): one comparison of the logits, no weights computed."""
        if weight <= 0.0:
            return np.arange(logits.shape[-1])
        return np.flatnonzero(logits > m + self.params.temperature * math.log(weight))

    def _candidates(
        self, logits: np.ndarray, m: float, enough: Callable[[np.ndarray], bool]
    ) -> np.ndarray:
        """The tokens above a floor (ascending ids), the floor lowered until `enough` says
        they hold what is asked for; every token at the last."""
        floor = TOP_P_FLOOR
        while True:
            ids = self._above(logits, m, floor)
            if floor == 0.0 or enough(ids):
                return ids
            floor = floor * 1e-2 if floor > 1e-30 else 0.0

    def _top_k(self, logits: np.ndarray, m: float) -> np.ndarray:
        """The top_k likeliest tokens (ascending ids); among tokens as likely as the k-th, the
        lowest ids. Top-p follows among them."""
        k = self.params.top_k
        cand = self._candidates(logits, m, lambda ids: len(ids) >= k)
        vals = logits[cand]
        kth = np.partition(vals, len(vals) - k)[len(vals) - k]
        above = cand[vals > kth]
        ids = np.sort(np.concatenate([above, cand[vals == kth][: k - len(above)]]))
        return ids if self.params.top_p >= 1.0 else self._top_p_among(logits, ids)

    def _top_p_among(self, logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Top-p among `ids` (ascending) on their own mass, as if the rest of the row were
        not there: the smallest prefix by logit (ties by token id) that reaches it."""
        vals = logits[ids]
        order = np.lexsort((ids, -vals))
        p = self._exact(vals[order], float(vals.max()))
        return np.sort(ids[order[: self._top_p_keep(p / p.sum())]])

    def _top_p(self, logits: np.ndarray, m: float) -> np.ndarray:
        """The smallest prefix (by logit, ties by token id) whose share of all the mass reaches
        top_p (ascending ids), found among the likeliest tokens only (`_candidates`)."""
        top_p = self.params.top_p
        if top_p >= 1.0:  # min-p alone: its exact cut follows
            return self._above(logits, m, self.params.min_p * (1 - CUT_MARGIN))
        total = self._total(logits, m)
        wanted = top_p * total * (1 + CUT_MARGIN)
        cand = self._candidates(logits, m, lambda ids: self._exact(logits[ids], m).sum() >= wanted)
        ranked = np.sort(logits[cand])[::-1]  # the candidates' logits, likeliest first
        exact = self._exact(ranked, m)
        mass = np.cumsum(exact) / total
        keep = self._top_p_keep_mass(mass)
        near = np.abs(mass[max(keep - 2, 0) : keep] / top_p - 1.0)
        if (near.size and near.min() < CUT_MARGIN) or mass[-1] < top_p:
            # Too close to call on float32 terms: float64 over the whole row, as before.
            whole = self._exact(logits, m)
            keep = self._top_p_keep(exact / whole.sum())
        edge = ranked[min(keep, len(ranked)) - 1]
        vals = logits[cand]
        kept = vals > edge
        tied = np.flatnonzero(vals == edge)  # the lowest ids of those as likely as the last
        kept[tied[: keep - np.count_nonzero(kept)]] = True
        return cand[kept]

    def _total(self, logits: np.ndarray, m: float) -> float:
        """Every token's weight relative to the likeliest, summed (`_exp2_total`)."""
        n = logits.shape[-1]
        if len(self._scratch) != n:
            self._scratch = np.empty(n, dtype=np.float32)
        return _exp2_total(logits, m, _LOG2E / self.params.temperature, self._scratch)

    def _top_p_keep(self, p_sorted: np.ndarray) -> int:
        """How many of these tokens (sorted, each with its share of all the mass) top-p keeps:
        the smallest prefix whose mass reaches top_p, at least one."""
        return self._top_p_keep_mass(np.cumsum(p_sorted))

    def _top_p_keep_mass(self, mass: np.ndarray) -> int:
        return int(np.searchsorted(mass, self.params.top_p * (1 - 1e-12))) + 1

    def draw(self, probs: Row) -> int:
        """Inverse-CDF draw; one uniform number per token keeps seeded runs reproducible.

        The CDF is summed over the tokens with a probability only: a cumulative sum of the
        whole 152k vocabulary cost 0.56 ms a draw, most of a draft step's Python at T > 0,
        where top-p leaves a few dozen; a `Dist` knows its support, which saves the search.
        The draw is the same token as over the whole row (adding zeros changes no partial
        sum, and the first sum above u is a token's own)."""
        support = support_of(probs)
        return self.draw_among(support, probs[support])

    def draw_among(self, support: np.ndarray, weights: np.ndarray) -> int:
        """A draw of one of the tokens `support` (ascending ids), each with its weight in
        `weights`: the same inverse-CDF draw as over the whole row."""
        cdf = np.cumsum(weights)
        u = self.rng.random() * cdf[-1]
        return int(support[min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)])
