"""Drafters: where the K guessed tokens of a round come from.

Each round a drafter `offer`s typed proposals (what it can draft after the context, at most
`room` tokens); the draft-length policy chooses one and its shape (K, or a tree), and the
engine has that proposal `draft` it, handing it the policy's stop rule.

- `ModelDrafter`: a smaller model sharing the target's vocabulary;
- `NgramDrafter`: prompt lookup, copying what followed the last occurrence of the current
  n-gram in prompt + output (no model, no memory);
- `HybridDrafter`: n-gram when the context offers a match, the model otherwise;
- `EitherDrafter`: lookups and the model both on offer, for a policy that weighs them (`auto`);
- `NoDrafter`: nothing on offer, plain decoding through the same loop.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Protocol

import numpy as np

from edgespec.engine.cache import CachedModel
from edgespec.engine.protocol import Model
from edgespec.engine.sampling import PROPOSAL_FLOOR, Row, Sampler, support_of
from edgespec.engine.tree import TreeDraft
from edgespec.engine.verify import EMPTY_DRAFT, Draft
from edgespec.options import DrafterKind


class DraftKind(Enum):
    """What a proposal's tokens cost: what the policy prices and learns apart."""

    LOOKUP = "lookup"  # found in text already seen: no cost per token
    MODEL = "model"  # a draft model's: a step each


# A draft row's head (`_head`): its tokens at least this likely relative to its likeliest.
_LOG_FLOOR32 = np.float32(math.log(PROPOSAL_FLOOR))
# The source named for the tokens a grammar alone allows (taken without verification).
GRAMMAR = "grammar"
# The source named for the tokens drafted from a request's predicted output (prediction.py).
PREDICTION = "prediction"

StopRule = Callable[[int, Sequence[float]], bool]
"""(tokens drafted so far, the chance that each prefix up to and with the next token is
accepted, read from the draft's probabilities) -> stop before the next one."""


class Drafter(Protocol):
    @property
    def name(self) -> str:
        """What stats call it: a `DrafterKind` for the drafters one may ask for; a lookup
        inside one of them (`auto`'s suffix drafter) names itself."""
        ...

    def begin(self, tokens: Sequence[int]) -> None:
        """A generation starts from context `tokens`."""
        ...

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        """What can be drafted after `tokens` this round, at most `room` tokens each."""
        ...

    def commit(self, tokens: Sequence[int]) -> None:
        """`tokens` are committed (after each round, and at the end): drop anything beyond."""
        ...

    def end(self) -> None:
        """The generation is over (after its last commit)."""
        ...


class Branches(Protocol):
    """What a lookup with forks makes a tree draft from (the suffix drafter)."""

    def tree(self, lookup: Lookup, k: int, nodes: int, width: int, depth: int) -> TreeDraft: ...


@dataclass(frozen=True)
class Lookup:
    """Tokens found in text already seen, carried whole: a draft of K is its first K."""

    kind: ClassVar[DraftKind] = DraftKind.LOOKUP
    continuation: tuple[int, ...]
    match: int  # the length of the match it was found at
    source: str  # the drafter's name, for stats
    resumed: bool = False  # it takes up again the source a copy left (an edit)
    # Depths where the continuation has an alternative, most likely first (tree drafts).
    forks: tuple[int, ...] = ()
    branches: Branches | None = None

    @property
    def available(self) -> int:
        return len(self.continuation)

    @property
    def next(self) -> int | None:
        """The first token it would draft."""
        return self.continuation[0] if self.continuation else None

    def draft(self, k: int, sampler: Sampler, stop: StopRule | None = None) -> Draft:
        found = list(self.continuation[:k])
        return Draft(found, None, self.source) if found else EMPTY_DRAFT

    def tree(
        self,
        k: int,
        nodes: int,
        width: int,
        depth: int,
        stop: StopRule | None = None,
        sampler: Sampler | None = None,
    ) -> TreeDraft:
        if self.branches is None:
            return TreeDraft.build(self.continuation[: min(k, depth)], [], self.source)
        return self.branches.tree(self, k, nodes, width, depth)


@dataclass(frozen=True)
class ModelProposal:
    """The draft model, `behind` context tokens short of `tokens` (read before it drafts)."""

    kind: ClassVar[DraftKind] = DraftKind.MODEL
    drafter: ModelDrafter
    tokens: Sequence[int]
    available: int
    behind: int

    def draft(self, k: int, sampler: Sampler, stop: StopRule | None = None) -> Draft:
        return self.drafter.propose(self.tokens, k, sampler, stop, self.behind)

    def tree(
        self,
        k: int,
        nodes: int,
        width: int,
        depth: int,
        stop: StopRule | None = None,
        sampler: Sampler | None = None,
    ) -> TreeDraft:
        return self.drafter.propose_tree(self.tokens, k, nodes, width, depth, stop, sampler)


Proposal = Lookup | ModelProposal


@dataclass(frozen=True)
class Choice:
    """The policy's choice for a round: a proposal, K, and a tree's shape (`width` leaves,
    `nodes` tokens in all; width 1: a chain), and how a model draft decides to stop early."""

    proposal: Proposal
    k: int
    width: int = 1
    nodes: int = 0
    stop: StopRule | None = None


class NoDrafter:
    name = DrafterKind.NONE

    def begin(self, tokens: Sequence[int]) -> None:
        pass

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        return []

    def commit(self, tokens: Sequence[int]) -> None:
        pass

    def end(self) -> None:
        pass


class NgramDrafter:
    """Prompt lookup with an incremental index: O(1) work per new token, longest n-gram first."""

    name = DrafterKind.NGRAM

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._index: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_ngram + 1)]
        self._indexed = 0

    def begin(self, tokens: Sequence[int]) -> None:
        self._index = [{} for _ in range(self.max_ngram + 1)]
        self._indexed = 0
        self._extend(tokens)

    def _extend(self, tokens: Sequence[int]) -> None:
        # Index every n-gram ending before the last token: a lookup of the current suffix
        # then never finds itself.
        end = len(tokens)
        for j in range(self._indexed, end):
            for n in range(self.min_ngram, self.max_ngram + 1):
                if j >= n:
                    self._index[n][tuple(tokens[j - n : j])] = j
        self._indexed = end

    def _lookup(self, tokens: Sequence[int], k: int) -> tuple[list[int], int]:
        """What followed the last earlier occurrence of the longest matching n-gram, and its
        length (0: none), from the context as committed."""
        if k <= 0:
            return [], 0
        end = len(tokens)
        for n in range(min(self.max_ngram, end), self.min_ngram - 1, -1):
            j = self._index[n].get(tuple(tokens[end - n :]))
            if j is not None:
                return list(tokens[j : min(j + k, end)]), n
        return [], 0

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        found, match = self._lookup(tokens, room)
        return [Lookup(tuple(found), match, self.name)] if found else []

    def commit(self, tokens: Sequence[int]) -> None:
        self._extend(tokens)

    def end(self) -> None:
        pass


class ModelDrafter:
    """Drafts with a small model; stops early when its confidence falls below `p_min`, or
    where the round's stop rule (the policy's) says the next token is not worth its cost."""

    name = DrafterKind.MODEL

    def __init__(self, model: Model | CachedModel, p_min: float = 0.75) -> None:
        # Drafters that share the draft model (a fixed `model` drafter and `auto`) share one
        # CachedModel, so its cache stays right.
        self.draft = model if isinstance(model, CachedModel) else CachedModel(model)
        self.p_min = p_min
        # The context whose ids were checked against the draft's vocabulary, and how far.
        self._checked: tuple[Sequence[int] | None, int] = (None, 0)

    def _top_two(
        self, logits: np.ndarray, q: Row | None
    ) -> tuple[tuple[int, float], tuple[int, float]]:
        """The two likeliest tokens of the draft's row: of its softmax, or of its processed
        distribution `q` where it samples."""
        return top_two(logits) if q is None else top_two_of(q)

    def begin(self, tokens: Sequence[int]) -> None:
        pass  # the cache is re-synchronised lazily, so a shared prefix is reused

    def _unread(self, tokens: Sequence[int]) -> int | None:
        """How many of the context's tokens the draft has not read yet; None when those hold a
        token id the draft model does not have (the target's vocabulary may be larger): such an
        id is never fed to it, so it drafts nothing more until a context without it."""
        start = self.draft.shared(tokens)
        # The ids of a growing context are checked once each, not every round again: while
        # other drafters win, the draft reads nothing and its unread part grows.
        seen, checked = self._checked
        since = max(start, checked if seen is tokens else 0)
        if max(tokens[since:], default=-1) >= self.draft.model.n_vocab:
            return None
        self._checked = (tokens, len(tokens))
        return len(tokens) - start

    def _can_read(self, tokens: Sequence[int]) -> bool:
        return self._unread(tokens) is not None

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        behind = self._unread(tokens) if room > 0 else None
        if behind is None:
            return []
        return [ModelProposal(self, tokens, room, behind)]

    def _stops(
        self, stop: StopRule | None, chances: list[float], confidence: float, drafted: int
    ) -> bool:
        """Whether to stop before drafting one more token, whose confidence makes the chance
        that the draft so far and it are accepted `chances[-1]`."""
        if stop is not None:
            return stop(drafted, chances)
        return confidence < self.p_min

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        sampler: Sampler,
        stop: StopRule | None = None,
        behind: int | None = None,
    ) -> Draft:
        """`behind`: what this round's `offer` found the draft short of `tokens` (not looked
        for again: a comparison of the whole context)."""
        if behind is None:
            behind = self._unread(tokens)
        if k <= 0 or behind is None:
            return EMPTY_DRAFT
        logits = self.draft.sync(tokens, len(tokens) - behind)
        out: list[int] = []
        qs: list[Row] = []
        confidences: list[float] = []
        chances: list[float] = []
        cumulative = 1.0
        while True:
            if sampler.greedy:
                tok, confidence = top_one(logits)
            else:
                q = sampler.proposal(logits)
                tok = sampler.draw(q)
                confidence = float(q[support_of(q)].max())
                qs.append(q)
            cumulative *= confidence
            chances.append(cumulative)
            if self._stops(stop, chances, confidence, len(out)):
                if qs:
                    qs.pop()
                break
            out.append(tok)
            confidences.append(confidence)
            if len(out) == k:
                break
            logits = self.draft.decode([tok], 1)[0]
        return Draft(out, None if sampler.greedy else qs, self.name, confidence=tuple(confidences))

    def propose_tree(
        self,
        tokens: Sequence[int],
        k: int,
        nodes: int,
        width: int,
        depth: int,
        stop: StopRule | None = None,
        sampler: Sampler | None = None,
    ) -> TreeDraft:
        """A main chain and, as one-token leaves, the draft's other likeliest token where the
        chain is likeliest to miss and the target to take them.

        Greedy, the chain is the draft's argmax and the leaves its second choices. At T > 0 the
        chain is sampled from the draft's processed distribution q, as a chain draft is, and
        verified as one (accepted with probability min(1, p/q)); a leaf is the likeliest token
        other than the one drawn, matched against the target's draw from the residual
        (`verify_tree`). With an argmax chain a sampled target would only take it as often as
        it draws the draft's first choice. A leaf costs no draft step (the draft has already
        scored every position of the chain); each scores the chance of reaching its position
        times the draft's probability of its token. Where the chain stops by its own rule, both
        likeliest tokens there are candidates too (as leaves: in the chain, such unsure tokens
        pulled the learned acceptance rate down and the chains with it). How often a second
        choice is the target's token where the first is not: `PolicyConfig.fork_prior_model`."""
        k = min(k, depth)
        if k <= 0 or not self._can_read(tokens):
            return TreeDraft([], [], 0, self.name)
        sampler = None if sampler is None or sampler.greedy else sampler
        logits = self.draft.sync(tokens)
        main: list[int] = []
        confidences: list[float] = []
        chances: list[float] = []
        qs: list[Row] = []
        leaves: list[tuple[float, int, int]] = []  # (score, depth, token)
        reach = 1.0
        while True:
            q = None if sampler is None else sampler.proposal(logits)
            (first, p1), (second, p2) = self._top_two(logits, q)
            chances.append(reach * p1)
            if self._stops(stop, chances, p1, len(main)):
                leaves += [(reach * p2, len(main), second), (reach * p1, len(main), first)]
                break
            if sampler is not None and q is not None:  # the draw joins the chain
                qs.append(q)
                drawn = sampler.draw(q)
                if drawn != first:  # the leaf: the likeliest token not drawn
                    second, p2 = first, p1
                first = drawn
            leaves.append((reach * p2, len(main), second))
            main.append(first)
            confidences.append(p1)
            reach *= p1
            if len(main) == k:
                break
            logits = self.draft.decode([first], 1)[0]
        # A leaf the draft gives no chance (outside its top-p) would only take a row.
        chosen = heapq.nlargest(min(width - 1, nodes - len(main)), (x for x in leaves if x[0] > 0))
        branches = [(at, [tok]) for _, at, tok in chosen]
        return TreeDraft.build(main, branches, self.name, tuple(confidences), tuple(qs))

    def commit(self, tokens: Sequence[int]) -> None:
        self.draft.commit(tokens)

    def end(self) -> None:
        pass


def _two_largest(values: np.ndarray) -> tuple[int, int]:
    """The indices of the largest value and of the next one (the first of equals): argmax over
    the row, then over what lies either side of it, with no copy (0.1 ms for 152k values, where
    argpartition took 1.5 ms on logits)."""
    first = int(np.argmax(values))
    left, right = values[:first], values[first + 1 :]
    if not len(right):
        return first, int(np.argmax(left))
    after = first + 1 + int(np.argmax(right))
    if not len(left):
        return first, after
    before = int(np.argmax(left))
    return first, before if values[before] >= values[after] else after


def top_two_of(q: Row) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two likeliest tokens of a distribution, each with its probability (among its
    support where it knows it: a second token outside it is the first id it leaves out)."""
    support = support_of(q)
    if len(support) == 1:
        first = int(support[0])
        second = 1 if first == 0 else 0
        return (first, float(q[first])), (second, float(q[second]))
    i, j = _two_largest(q[support])
    first, second = int(support[i]), int(support[j])
    return (first, float(q[first])), (second, float(q[second]))


def _head(logits: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, float]:
    """A draft row's head: its argmax (the first of equals), the tokens at least
    `PROPOSAL_FLOOR` as likely (ascending ids), their logits in float64, their weights
    exp(logit - max) and the weights' sum."""
    first = int(logits.argmax())
    m = logits[first]
    ids = np.flatnonzero(logits >= m + _LOG_FLOOR32)
    vals = logits[ids].astype(np.float64)
    weights = np.exp(vals - float(m))
    return first, ids, vals, weights, float(weights.sum())


def top_one(logits: np.ndarray) -> tuple[int, float]:
    """The likeliest token of a draft's row (the first of equals) and its probability among the
    row's head, as `top_two` gives them: what a chain's draft step needs."""
    first, _, _, _, total = _head(logits)
    return first, 1.0 / total  # its own weight is exp(0)


def top_two(logits: np.ndarray) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two likeliest tokens of a draft's row of logits (the first of equals first), each
    with its probability: the softmax of the row's head, the tokens at least `PROPOSAL_FLOOR`
    as likely as the likeliest (a second token outside it has probability 0 here).

    What the stop rule and the tree's leaves weigh is a probability among the tokens a draft
    would ever propose; leaving the tail out spares a pass of exp over the whole row, most of
    a greedy draft step's time at 152k tokens. It overstates a probability by the tail's
    share of the row: on the real draft model (0.5B, 362 greedy rows) by 0.2 % at the median
    and 4.3 % at most, where the head held 20 tokens at the median and 2,184 at most
    (benchmarks/overhead/proposal_rows.py)."""
    first, ids, vals, weights, total = _head(logits)
    if len(ids) == 1:
        return (first, 1.0 / total), (1 if first == 0 else 0, 0.0)
    # The second: the first of equals among the rest (ids ascend, argmax takes the first).
    vals[np.searchsorted(ids, first)] = -np.inf
    j = int(vals.argmax())
    return (first, 1.0 / total), (int(ids[j]), float(weights[j]) / total)


class HybridDrafter:
    """N-gram lookup when the context offers a match (free), the draft model otherwise."""

    name = DrafterKind.HYBRID

    def __init__(self, lookup: Drafter, model: ModelDrafter | None) -> None:
        self.lookup = lookup  # NgramDrafter, or auto's suffix drafter
        self.model = model

    def begin(self, tokens: Sequence[int]) -> None:
        self.lookup.begin(tokens)
        if self.model is not None:
            self.model.begin(tokens)

    def _model_offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        return self.model.offer(tokens, room) if self.model is not None else []

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        return self.lookup.offer(tokens, room) or self._model_offer(tokens, room)

    def commit(self, tokens: Sequence[int]) -> None:
        self.lookup.commit(tokens)
        if self.model is not None:
            self.model.commit(tokens)

    def end(self) -> None:
        self.lookup.end()
        if self.model is not None:
            self.model.end()


class EitherDrafter(HybridDrafter):
    """Both lookups (auto's suffix drafter) and, when there is one, the draft model on offer
    every round, for a policy that weighs them against each other: the drafters behind `auto`."""

    name = DrafterKind.AUTO

    def __init__(self, lookup: Drafter, model: ModelDrafter | None = None) -> None:
        super().__init__(lookup, model)

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        return self.lookup.offer(tokens, room) + self._model_offer(tokens, room)
