"""The target's log-probabilities of the tokens it returns, and its likeliest alternatives.

They are read from the very row of logits that verified (or, for plain decoding, produced) each
token, as the log-softmax of the raw logits: the model's own distribution, before temperature,
top-k, top-p, min-p or a grammar, as OpenAI and plain decoding report it. A token comes out of
the same row whether it was drafted or not, so for the same logits the numbers are the same
with or without speculation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Logprob:
    """One returned token's log-probability and the `top` likeliest tokens at its position,
    likeliest first (ties: the lower id first)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def logprobs_of(rows: np.ndarray, tokens: Sequence[int], top: int) -> list[Logprob]:
    """Row i's log-probability of tokens[i] and its `top` alternatives (rows: raw logits)."""
    return [_scored(rows[i], tok, top) for i, tok in enumerate(tokens)]


def _scored(row: np.ndarray, token: int, top: int) -> Logprob:
    # A stable log-sum-exp: exponents of (logit - max) <= 0, summed in float64.
    peak = float(row.max())
    norm = peak + float(np.log(np.exp(row - peak).sum(dtype=np.float64)))
    if top <= 0:
        return Logprob(logprob=float(row[token]) - norm)
    n = min(top, len(row))
    ids = np.argpartition(row, len(row) - n)[len(row) - n :] if n < len(row) else np.arange(n)
    ids = ids[np.lexsort((ids, -row[ids]))]
    best = tuple((int(i), float(row[i]) - norm) for i in ids)
    return Logprob(logprob=float(row[token]) - norm, top=best)
