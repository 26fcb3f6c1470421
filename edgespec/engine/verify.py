"""Verification of a draft against the target: the step that makes speculation lossless.

Leviathan et al. 2022 / Chen et al. 2023: accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
at the first rejection draw from norm(max(0, p_i - q_i)); with all K accepted draw a bonus token
from p_{K+1}. A deterministic draft is q = delta(x): accept with p_i(x), else draw p_i without x.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from edgespec.engine.sampling import Row, Sampler, support_of


@dataclass(frozen=True)
class Draft:
    """Proposed tokens; `q[i]`: the distribution token i was drawn from (None: deterministic)."""

    tokens: list[int]
    q: list[Row] | None = None
    source: str = "none"
    # Where a sampled draft was cut at a token the target cannot read: that token's q. It is
    # still rejected there, and the target's token drawn from the residual, as if verified.
    cut_q: Row | None = None
    confidence: tuple[float, ...] = ()

    def within(self, n_vocab: int) -> Draft:
        """The draft up to its first token the target does not have (a larger vocabulary's)."""
        cut = next((i for i, t in enumerate(self.tokens) if t >= n_vocab), len(self.tokens))
        return self.prefix(cut, reject_next=True)

    def through_end(self, is_end: Callable[[int], bool]) -> Draft:
        """The draft up to and with its first end-of-generation token: nothing after is kept."""
        cut = next((i + 1 for i, t in enumerate(self.tokens) if is_end(t)), len(self.tokens))
        return self.prefix(cut, reject_next=False)

    def prefix(self, n: int, reject_next: bool) -> Draft:
        """The first `n` tokens; `reject_next`: a sampled draft keeps token n's q as `cut_q`."""
        if n == len(self.tokens):
            return self
        q = None if self.q is None else self.q[:n]
        cut_q = self.q[n] if reject_next and self.q is not None else None
        return Draft(self.tokens[:n], q, self.source, cut_q, self.confidence[:n])

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft([])


def verify_greedy(draft: Sequence[int], logits: np.ndarray) -> tuple[int, int]:
    """(accepted, next token): accepted while each is the argmax of its row, read lazily."""
    for i, tok in enumerate(draft):
        best = int(np.argmax(logits[i]))
        if best != tok:
            return i, best
    return len(draft), int(np.argmax(logits[len(draft)]))


def verify_sampled(
    draft: Draft, target_probs: Callable[[int], Row], sampler: Sampler
) -> tuple[int, int]:
    """Rejection sampling; `target_probs(i)`: row i's processed distribution, asked lazily."""
    rng = sampler.rng
    for i, tok in enumerate(draft.tokens):
        p = target_probs(i)
        # q[tok] > 0 always holds for a token drawn from q (and tok < len(q)).
        accept = p[tok] if draft.q is None else min(1.0, p[tok] / draft.q[i][tok])
        if rng.random() < accept:
            continue
        if draft.q is None:
            support = support_of(p)
            residual = p[support]
            residual[support == tok] = 0.0
            return i, draw_residual(support, residual, p, sampler)
        return i, after_rejection(p, draft.q[i], sampler)
    p = target_probs(len(draft))
    if draft.cut_q is not None:
        # A drafted token the target cannot produce: always a rejection.
        return len(draft), after_rejection(p, draft.cut_q, sampler)
    return len(draft), sampler.draw(p)


def after_rejection(p: Row, q: Row, sampler: Sampler) -> int:
    """The target's token where a token drawn from q was rejected: a draw from the residual
    norm(max(p - q, 0)) on p's support, which makes the step's output exactly p. Ids only the
    target has get q = 0; ids only the draft has are never drafted (Draft.within), so ignoring
    them leaves acceptance and residual exact."""
    support = support_of(p)
    q_there = np.zeros(len(support))
    inside = support < len(q)
    q_there[inside] = q[support[inside]]
    return draw_residual(support, np.maximum(p[support] - q_there, 0.0), p, sampler)


def draw_residual(support: np.ndarray, residual: np.ndarray, p: Row, sampler: Sampler) -> int:
    total = residual.sum()
    if total <= 0.0:
        # Only reachable through rounding when p is (numerically) equal to q.
        residual, total = p[support], p[support].sum()
    return sampler.draw_among(support, residual / total)
