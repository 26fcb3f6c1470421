"""Drafters: each round a drafter `offer`s proposals, the policy chooses one and its shape (K,
or a tree), and the engine has that proposal `draft` with the policy's stop rule."""

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

    LOOKUP = "lookup"
    MODEL = "model"


_LOG_FLOOR32 = np.float32(math.log(PROPOSAL_FLOOR))
GRAMMAR = "grammar"  # the source of the tokens a grammar alone allows
PREDICTION = "prediction"  # the source of the tokens drafted from a predicted output

# (tokens drafted so far, each prefix's chance of acceptance with the next token) -> stop now.
StopRule = Callable[[int, Sequence[float]], bool]


class Drafter(Protocol):
    @property
    def name(self) -> str:
        """What stats call it: a `DrafterKind` (a lookup inside one names itself)."""
        ...

    def begin(self, tokens: Sequence[int]) -> None: ...

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]: ...

    def commit(self, tokens: Sequence[int]) -> None:
        """`tokens` are committed (each round, and at the end): drop anything beyond."""
        ...

    def end(self) -> None: ...


class Branches(Protocol):
    def tree(self, lookup: Lookup, k: int, nodes: int, width: int, depth: int) -> TreeDraft: ...


@dataclass(frozen=True)
class Lookup:
    """Tokens found in text already seen, carried whole: a draft of K is its first K."""

    kind: ClassVar[DraftKind] = DraftKind.LOOKUP
    continuation: tuple[int, ...]
    match: int
    source: str
    resumed: bool = False  # it takes up again the source a copy left (an edit)
    forks: tuple[int, ...] = ()  # depths with an alternative, likeliest first (trees)
    branches: Branches | None = None

    @property
    def available(self) -> int:
        return len(self.continuation)

    @property
    def next(self) -> int | None:
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
    """A round's proposal, K, tree shape (`width` leaves, `nodes` tokens) and stop rule."""

    proposal: Proposal
    k: int
    width: int = 1
    nodes: int = 0
    stop: StopRule | None = None


class NoDrafter:
    """Nothing on offer: plain decoding through the same loop."""

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
    """Prompt lookup: what followed the last occurrence of the context's longest n-gram."""

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
        self.commit(tokens)

    def commit(self, tokens: Sequence[int]) -> None:
        # n-grams ending before the last token: a lookup never finds the context's own.
        end = len(tokens)
        for j in range(self._indexed, end):
            for n in range(self.min_ngram, self.max_ngram + 1):
                if j >= n:
                    self._index[n][tuple(tokens[j - n : j])] = j
        self._indexed = end

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        if room <= 0:
            return []
        end = len(tokens)
        for n in range(min(self.max_ngram, end), self.min_ngram - 1, -1):
            j = self._index[n].get(tuple(tokens[end - n :]))
            if j is not None:
                found = tuple(tokens[j : min(j + room, end)])
                return [Lookup(found, n, self.name)] if found else []
        return []

    def end(self) -> None:
        pass


class ModelDrafter:
    """A small model's draft, stopped by the round's stop rule, else below confidence `p_min`."""

    name = DrafterKind.MODEL

    def __init__(self, model: Model | CachedModel, p_min: float = 0.75) -> None:
        # Drafters on one draft model share its CachedModel, so its mirror stays right.
        self.draft = model if isinstance(model, CachedModel) else CachedModel(model)
        self.p_min = p_min
        self._checked: tuple[Sequence[int] | None, int] = (None, 0)

    def begin(self, tokens: Sequence[int]) -> None:
        pass  # synced lazily, so a shared prefix is reused

    def _unread(self, tokens: Sequence[int]) -> int | None:
        """Context tokens the draft has not read; None where they hold an id it does not have
        (the target's vocabulary may be larger). A growing context's ids are checked once."""
        start = self.draft.shared(tokens)
        seen, checked = self._checked
        since = max(start, checked if seen is tokens else 0)
        if max(tokens[since:], default=-1) >= self.draft.model.n_vocab:
            return None
        self._checked = (tokens, len(tokens))
        return len(tokens) - start

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        behind = self._unread(tokens) if room > 0 else None
        if behind is None:
            return []
        return [ModelProposal(self, tokens, room, behind)]

    def _stops(
        self, stop: StopRule | None, chances: list[float], confidence: float, drafted: int
    ) -> bool:
        if stop is not None:
            return stop(drafted, chances)
        return confidence < self.p_min

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        sampler: Sampler,
        stop: StopRule | None,
        behind: int,
    ) -> Draft:
        if k <= 0:
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
        """A main chain (argmax; sampled from q at T > 0, as a chain draft, which an argmax
        chain would not match) and, as free one-token leaves, the likeliest tokens not taken
        where the chain is likeliest to miss (reach times probability). Where the chain stops,
        both likeliest tokens become leaves: unsure tokens in it pulled acceptance down."""
        k = min(k, depth)
        if k <= 0 or self._unread(tokens) is None:
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
            (first, p1), (second, p2) = top_two(logits) if q is None else top_two_of(q)
            chances.append(reach * p1)
            if self._stops(stop, chances, p1, len(main)):
                leaves += [(reach * p2, len(main), second), (reach * p1, len(main), first)]
                break
            if sampler is not None and q is not None:
                qs.append(q)
                drawn = sampler.draw(q)
                if drawn != first:
                    second, p2 = first, p1
                first = drawn
            leaves.append((reach * p2, len(main), second))
            main.append(first)
            confidences.append(p1)
            reach *= p1
            if len(main) == k:
                break
            logits = self.draft.decode([first], 1)[0]
        # A leaf outside the draft's top-p would only take a row.
        chosen = heapq.nlargest(min(width - 1, nodes - len(main)), (x for x in leaves if x[0] > 0))
        branches = [(at, [tok]) for _, at, tok in chosen]
        return TreeDraft.build(main, branches, self.name, tuple(confidences), tuple(qs))

    def commit(self, tokens: Sequence[int]) -> None:
        self.draft.commit(tokens)

    def end(self) -> None:
        pass


def _two_largest(values: np.ndarray) -> tuple[int, int]:
    """The largest value's index and the next one's (the first of equals), with no copy."""
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
    support = support_of(q)
    if len(support) == 1:
        first = int(support[0])
        second = 1 if first == 0 else 0
        return (first, float(q[first])), (second, float(q[second]))
    i, j = _two_largest(q[support])
    first, second = int(support[i]), int(support[j])
    return (first, float(q[first])), (second, float(q[second]))


def _head(logits: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, float]:
    """A draft row's argmax, its head (ascending ids), their float64 logits, weights and sum."""
    first = int(logits.argmax())
    m = logits[first]
    ids = np.flatnonzero(logits >= m + _LOG_FLOOR32)
    vals = logits[ids].astype(np.float64)
    weights = np.exp(vals - float(m))
    return first, ids, vals, weights, float(weights.sum())


def top_one(logits: np.ndarray) -> tuple[int, float]:
    first, _, _, _, total = _head(logits)
    return first, 1.0 / total  # its own weight is exp(0)


def top_two(logits: np.ndarray) -> tuple[tuple[int, float], tuple[int, float]]:
    """A draft row's two likeliest tokens, with probabilities among its head (`_head`): the
    tail's exp would be most of a greedy draft step; leaving it out overstates by its share."""
    first, ids, vals, weights, total = _head(logits)
    if len(ids) == 1:
        return (first, 1.0 / total), (1 if first == 0 else 0, 0.0)
    # ids ascend, so argmax over the rest takes the first of equals.
    vals[np.searchsorted(ids, first)] = -np.inf
    j = int(vals.argmax())
    return (first, 1.0 / total), (int(ids[j]), float(weights[j]) / total)


class HybridDrafter:
    """N-gram lookup when the context offers a match (free), the draft model otherwise."""

    name = DrafterKind.HYBRID

    def __init__(self, lookup: Drafter, model: ModelDrafter | None) -> None:
        self.lookup = lookup
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
    """Lookups and the draft model both on offer every round, for `auto`'s policy to weigh."""

    name = DrafterKind.AUTO

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        return self.lookup.offer(tokens, room) + self._model_offer(tokens, room)
