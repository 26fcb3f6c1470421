"""The target's logprobs of the tokens it returns, and its likeliest alternatives: the
log-softmax of the raw row that verified each token (before sampling settings or a grammar, as
OpenAI reports them), the same with or without speculation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Logprob:
    """A token's logprob and the likeliest `(token, logprob)`s there (ties: lower id first)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def logprobs_of(rows: np.ndarray, tokens: Sequence[int], top: int) -> list[Logprob]:
    return [_scored(rows[i], tok, top) for i, tok in enumerate(tokens)]


def _scored(row: np.ndarray, token: int, top: int) -> Logprob:
    # A stable log-sum-exp, summed in float64.
    peak = float(row.max())
    norm = peak + float(np.log(np.exp(row - peak).sum(dtype=np.float64)))
    if top <= 0:
        return Logprob(logprob=float(row[token]) - norm)
    n = min(top, len(row))
    ids = np.argpartition(row, len(row) - n)[len(row) - n :] if n < len(row) else np.arange(n)
    ids = ids[np.lexsort((ids, -row[ids]))]
    best = tuple((int(i), float(row[i]) - norm) for i in ids)
    return Logprob(logprob=float(row[token]) - norm, top=best)
