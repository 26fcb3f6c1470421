"""Constrained decoding: verification against the target's logits with the tokens a grammar
forbids at -inf, then the sampling policy, so the output is plain constrained decoding's. A full
mask is costly: greedy verification asks for one only where the target's argmax is forbidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edgespec.engine.sampling import Row, Sampler
from edgespec.engine.verify import Draft, verify_sampled


class Constraint(Protocol):
    """One generation's grammar state."""

    def allows(self, token: int) -> bool: ...

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, in order from here, are allowed (the state is kept)."""
        ...

    def mask(self, n_vocab: int) -> np.ndarray: ...

    def advance(self, token: int) -> None: ...

    def take_certain(self, limit: int) -> list[int]:
        """Advance through the tokens that are each the only one allowed; return them."""
        ...

    def incomplete(self) -> str | None:
        """Why the text is not a whole sentence of the grammar (None: it is)."""
        ...


@dataclass(frozen=True)
class Constrained:
    """A grammar, and whether the tokens it alone allows (certain) are taken without the target."""

    constraint: Constraint
    takes_certain: bool = True


def within_grammar(draft: Draft, constraint: Constraint) -> Draft:
    """The draft up to its first token the grammar forbids, whose rejection is certain (`cut_q`:
    the target's token is still drawn from the residual, as if verified)."""
    return draft.prefix(constraint.valid_prefix(draft.tokens), reject_next=True)


def masked(row: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    return np.where(allowed, row, -np.inf)


def verify_constrained(
    draft: Draft, logits: np.ndarray, sampler: Sampler, constraint: Constraint
) -> tuple[int, int]:
    """(accepted, next token) against the constrained distribution; the constraint past both."""
    if sampler.greedy:
        n_acc, nxt = _verify_greedy(draft.tokens, logits, constraint)
    else:
        n_acc, nxt = _verify_sampled(draft, logits, sampler, constraint)
    constraint.advance(nxt)
    return n_acc, nxt


def _verify_greedy(
    draft: Sequence[int], logits: np.ndarray, constraint: Constraint
) -> tuple[int, int]:
    for i, tok in enumerate(draft):
        best = _constrained_argmax(logits[i], constraint)
        if best != tok:
            return i, best
        constraint.advance(best)
    return len(draft), _constrained_argmax(logits[len(draft)], constraint)


def _constrained_argmax(row: np.ndarray, constraint: Constraint) -> int:
    """The argmax among allowed tokens: the row's own when allowed, with no mask."""
    best = int(np.argmax(row))
    if constraint.allows(best):
        return best
    return int(np.argmax(masked(row, constraint.mask(len(row)))))


def _verify_sampled(
    draft: Draft, logits: np.ndarray, sampler: Sampler, constraint: Constraint
) -> tuple[int, int]:
    asked = [0]  # rows are asked for in order

    def row(i: int) -> Row:
        while asked[0] < i:
            constraint.advance(draft.tokens[asked[0]])
            asked[0] += 1
        return sampler.dist(masked(logits[i], constraint.mask(logits.shape[-1])))

    return verify_sampled(draft, row, sampler)  # the constraint is past the accepted prefix
