"""Verification of a draft against the target: the step that makes speculation lossless.

Sampling follows Leviathan et al. 2022 / Chen et al. 2023: accept draft token x_i with
probability min(1, p_i(x_i) / q_i(x_i)); on the first rejection draw from norm(max(0, p_i - q_i));
when all K are accepted draw a bonus token from p_{K+1}. A deterministic draft (n-gram lookup,
argmax draft) is q = delta(x): accept with probability p_i(x), and the residual is p_i without x.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from edgespec.engine.sampling import Row, Sampler, support_of


@dataclass(frozen=True)
class Draft:
    """Proposed tokens; `q[i]` is the distribution token i was drawn from (None: deterministic).

    `source` names the drafter that made it (the hybrid drafter switches per round);
    `confidence[i]`, a draft model's probability of token i (what its stop rule weighed).
    """

    tokens: list[int]
    q: list[Row] | None = None
    source: str = "none"
    # Where a sampled draft was cut at a token the target does not have: the distribution that
    # token was drawn from. The target never sees the token, but verification still rejects it
    # there and draws from the residual, exactly as if it had been verified.
    cut_q: Row | None = None
    confidence: tuple[float, ...] = ()

    def within(self, n_vocab: int) -> Draft:
        """The draft up to its first token the target does not have (a draft model's
        vocabulary may be larger than the target's)."""
        cut = next((i for i, t in enumerate(self.tokens) if t >= n_vocab), len(self.tokens))
        if cut == len(self.tokens):
            return self
        kept = self.confidence[:cut]
        if self.q is None:  # deterministic: stopping earlier changes nothing
            return Draft(self.tokens[:cut], None, self.source, confidence=kept)
        return Draft(self.tokens[:cut], self.q[:cut], self.source, self.q[cut], kept)

    def through_end(self, is_end: Callable[[int], bool]) -> Draft:
        """The draft up to and with its first end-of-generation token: generation stops there,
        so nothing after it is ever kept, and verifying it is time lost (a copy of a prompt's
        file goes on into the chat template's next turn)."""
        cut = next((i + 1 for i, t in enumerate(self.tokens) if is_end(t)), len(self.tokens))
        if cut == len(self.tokens):
            return self
        q = None if self.q is None else self.q[:cut]
        return Draft(self.tokens[:cut], q, self.source, confidence=self.confidence[:cut])

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft([])


def verify_greedy(draft: Sequence[int], logits: np.ndarray) -> tuple[int, int]:
    """Accept while each draft token is the target's argmax; return (accepted, next token).

    `logits` has len(draft) + 1 rows: row i predicts the token after draft[:i]. Rows after
    the first rejection are never read (an argmax is a pass over the vocabulary).
    """
    for i, tok in enumerate(draft):
        best = int(np.argmax(logits[i]))
        if best != tok:
            return i, best
    return len(draft), int(np.argmax(logits[len(draft)]))


def verify_sampled(
    draft: Draft, target_probs: Callable[[int], Row], sampler: Sampler
) -> tuple[int, int]:
    """Rejection sampling; `target_probs(i)` gives the processed target distribution of row i.

    Rows are computed lazily: those after a rejection are never needed.
    """
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
        # The drafted token here is one the target cannot produce: always a rejection.
        return len(draft), after_rejection(p, draft.cut_q, sampler)
    return len(draft), sampler.draw(p)


def after_rejection(p: Row, q: Row, sampler: Sampler) -> int:
    """The target's token where a token drawn from q was rejected: a draw from the residual
    norm(max(p - q, 0)), which makes the step's output exactly p. The residual is computed on
    p's support only (it is zero elsewhere). q is the draft's, over its own vocabulary: ids
    only the target has get q = 0 (their mass reaches the output through the residual); ids
    only the draft has are never drafted (Draft.within), so ignoring them leaves acceptance and
    residual exact."""
    support = support_of(p)
    q_there = np.zeros(len(support))
    inside = support < len(q)
    q_there[inside] = q[support[inside]]
    return draw_residual(support, np.maximum(p[support] - q_there, 0.0), p, sampler)


def draw_residual(support: np.ndarray, residual: np.ndarray, p: Row, sampler: Sampler) -> int:
    """A draw from the residual, given on p's support (ascending ids)."""
    total = residual.sum()
    if total <= 0.0:
        # Only reachable through rounding when p is (numerically) equal to q.
        residual, total = p[support], p[support].sum()
    return sampler.draw_among(support, residual / total)
