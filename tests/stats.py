"""What sampled outputs are checked against: the exact distribution of short sequences and a
chi-squared goodness-of-fit test with fixed pass and fail thresholds."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import stats

from edgespec.engine.sampling import Sampler, SamplingParams
from tests.fakes import FakeModel

PASS_P = 1e-4
FAIL_P = 1e-6


def chi2_pvalue(counts: Counter, probs: dict) -> float:  # type: ignore[type-arg]
    """Goodness of fit, pooling categories expected fewer than 5 times."""
    n = sum(counts.values())
    assert all(k in probs for k in counts), f"impossible outcome seen: {set(counts) - set(probs)}"
    obs, exp, pool_o, pool_e = [], [], 0.0, 0.0
    for key, p in probs.items():
        if p * n >= 5:
            obs.append(counts.get(key, 0))
            exp.append(p * n)
        else:
            pool_o += counts.get(key, 0)
            pool_e += p * n
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    exp_arr = np.array(exp) * n / np.sum(exp)
    return float(stats.chisquare(obs, exp_arr).pvalue)


PROMPT = [1, 3]
STEPS = 3


def exact_sequence_probs(
    target: FakeModel, params: SamplingParams, prompt: Sequence[int] = PROMPT
) -> dict[tuple[int, ...], float]:
    sampler = Sampler(params)
    out: dict[tuple[int, ...], float] = {}
    for seq in itertools.product(range(target.n_vocab), repeat=STEPS):
        prob, context = 1.0, list(prompt)
        for tok in seq:
            prob *= sampler.probs(target.logits_for(context))[tok]
            context.append(tok)
        if prob > 0:
            out[seq] = prob
    return out


SEQ_PARAMS = {
    "t=1": SamplingParams(temperature=1.0),
    "t=0.7 top-k 3": SamplingParams(temperature=0.7, top_k=3),
    "t=1.3 top-p 0.8 min-p 0.05": SamplingParams(temperature=1.3, top_p=0.8, min_p=0.05),
}
