"""Drafters: where the K guessed tokens of a round come from.

Each round a drafter first says what it can offer (`options`: which drafter, how many tokens
at most, whether they cost a model step each); the draft-length policy picks an option and K;
then that drafter `propose`s the tokens.

- `ModelDrafter`: a smaller model sharing the target's vocabulary;
- `NgramDrafter`: prompt lookup, copying what followed the last occurrence of the current
  n-gram in prompt + output (no model, no memory);
- `HybridDrafter`: n-gram when the context offers a match, the model otherwise;
- `EitherDrafter`: n-gram and model both on offer, for a policy that weighs them (`auto`);
- `NoDrafter`: nothing on offer, plain decoding through the same loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edgespec.engine.cache import CachedModel, common_prefix
from edgespec.engine.protocol import Model
from edgespec.engine.sampling import Sampler
from edgespec.engine.tree import TreeDraft
from edgespec.engine.verify import EMPTY_DRAFT, Draft


class Drafter(Protocol):
    name: str

    def begin(self, tokens: Sequence[int]) -> None:
        """A generation starts from context `tokens`."""
        ...

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        """What can be drafted after `tokens` this round, at most `room` tokens each."""
        ...

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        """Up to k tokens to follow `tokens` (the whole context so far)."""
        ...

    def commit(self, tokens: Sequence[int]) -> None:
        """`tokens` are committed (after each round, and at the end): drop anything beyond."""
        ...

    def end(self) -> None:
        """The generation is over (after its last commit)."""
        ...


@dataclass(frozen=True)
class Option:
    """One way to draft this round."""

    drafter: Drafter  # who drafts it
    source: str  # "ngram" or "model": what the acceptance is learned for
    available: int  # the most tokens it can draft now
    free: bool  # a lookup (no cost per token) rather than a model step per token
    match: int = 0  # n-gram lookups: the length of the n-gram found
    behind: int = 0  # a model: context tokens it must read before drafting (its catch-up)
    next: int | None = None  # a lookup: the first token it would draft
    resumed: bool = False  # a lookup that takes up again the source a copy left (an edit)
    # Tree drafts (lookups that know other continuations): the depths where the main chain has
    # an alternative, most likely first. The policy sets `width` (leaves) and `nodes` (all
    # tokens of the tree) when it chooses a tree.
    forks: tuple[int, ...] = ()
    width: int = 1
    nodes: int = 0


class TreeDrafter(Protocol):
    def propose_tree(
        self, tokens: Sequence[int], k: int, nodes: int, width: int, depth: int
    ) -> TreeDraft:
        """A main chain of up to k tokens and branches at its forks: at most `nodes` tokens,
        `width` leaves and `depth` tokens on any path."""
        ...


class NoDrafter:
    name = "none"

    def begin(self, tokens: Sequence[int]) -> None:
        pass

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        return []

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        return EMPTY_DRAFT

    def commit(self, tokens: Sequence[int]) -> None:
        pass

    def end(self) -> None:
        pass


class NgramDrafter:
    """Prompt lookup with an incremental index: O(1) work per new token, longest n-gram first."""

    name = "ngram"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._index: list[dict[tuple[int, ...], int]] = []
        self._indexed = 0
        self.last_match = 0  # n-gram length of the last proposal (0: none)

    def begin(self, tokens: Sequence[int]) -> None:
        self._index = [{} for _ in range(self.max_ngram + 1)]
        self._indexed = 0

    def _extend(self, tokens: Sequence[int]) -> None:
        # Index every n-gram ending before the last token: a lookup of the current suffix
        # then never finds itself.
        end = len(tokens)
        for j in range(self._indexed, end):
            for n in range(self.min_ngram, self.max_ngram + 1):
                if j >= n:
                    self._index[n][tuple(tokens[j - n : j])] = j
        self._indexed = end

    def _lookup(self, tokens: Sequence[int], k: int) -> list[int]:
        """What followed the last earlier occurrence of the longest matching n-gram."""
        self.last_match = 0
        if k <= 0:
            return []
        self._extend(tokens)
        end = len(tokens)
        for n in range(min(self.max_ngram, end), self.min_ngram - 1, -1):
            j = self._index[n].get(tuple(tokens[end - n :]))
            if j is not None:
                self.last_match = n
                return list(tokens[j : min(j + k, end)])
        return []

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        found = self._lookup(tokens, room)
        if not found:
            return []
        return [Option(self, self.name, len(found), True, self.last_match, next=found[0])]

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        found = self._lookup(tokens, k)
        return Draft(found, None, self.name) if found else EMPTY_DRAFT

    def commit(self, tokens: Sequence[int]) -> None:
        pass

    def end(self) -> None:
        pass


StopRule = Callable[[int, float], bool]
"""(tokens drafted so far, cumulative draft probability with the next one) -> stop before it."""


class ModelDrafter:
    """Drafts with a small model; stops early when its confidence falls below `p_min`, or
    when `stop_rule` says the next token is not worth its cost."""

    name = "model"

    def __init__(
        self, model: Model | CachedModel, p_min: float = 0.75, stop_rule: StopRule | None = None
    ) -> None:
        # Drafters that share the draft model (a fixed `model` drafter and `auto`) share one
        # CachedModel, so its cache stays right.
        self.draft = model if isinstance(model, CachedModel) else CachedModel(model)
        self.p_min = p_min
        self.stop_rule = stop_rule

    def begin(self, tokens: Sequence[int]) -> None:
        pass  # the cache is re-synchronised lazily, so a shared prefix is reused

    def _can_read(self, tokens: Sequence[int]) -> bool:
        """False when the context holds a token id the draft model does not have (the target's
        vocabulary may be larger): such an id is never fed to it, so it drafts nothing more
        until a context without it."""
        start = common_prefix(self.draft.tokens, tokens)
        return max(tokens[start:], default=-1) < self.draft.model.n_vocab

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        if room <= 0 or not self._can_read(tokens):
            return []
        behind = len(tokens) - common_prefix(self.draft.tokens, tokens)
        return [Option(self, self.name, room, False, behind=behind)]

    def _stops(self, drafted: int, confidence: float, cumulative: float) -> bool:
        """Whether to stop before drafting one more token."""
        if self.stop_rule is not None:
            return self.stop_rule(drafted, cumulative)
        return confidence < self.p_min

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        if k <= 0 or not self._can_read(tokens):
            return EMPTY_DRAFT
        logits = self.draft.sync(tokens)
        out: list[int] = []
        qs: list[np.ndarray] = []
        cumulative = 1.0
        while True:
            if sampler.greedy:
                tok = int(np.argmax(logits))
                # float32 terms, a float64 sum: 0.15 ms a step instead of 0.22 (152k logits)
                confidence = 1.0 / float(np.exp(logits - logits[tok]).sum(dtype=np.float64))
            else:
                q = sampler.probs(logits)
                tok = sampler.draw(q)
                confidence = float(q.max())
                qs.append(q)
            cumulative *= confidence
            if self._stops(len(out), confidence, cumulative):
                if qs:
                    qs.pop()
                break
            out.append(tok)
            if len(out) == k:
                break
            logits = self.draft.decode([tok], 1)[0]
        return Draft(out, None if sampler.greedy else qs, self.name)

    def propose_tree(
        self, tokens: Sequence[int], k: int, nodes: int, width: int, depth: int
    ) -> TreeDraft:
        """A main chain of the draft's likeliest tokens and, as one-token leaves, its second
        choices where the chain is likeliest to miss and the target to take them.

        The chain is the draft's argmax, not a sample, at any temperature: the candidates are
        then deterministic and the tree's walk is lossless (`verify_tree`). A leaf costs no
        draft step (the draft has already scored every position of the chain); each scores
        the chance of reaching its position times the draft's probability of its token. Where
        the chain stops by its own rule, both likeliest tokens there are candidates too (as
        leaves: in the chain, such unsure tokens pulled the learned acceptance rate down and
        the chains with it; replayed, chat with trees 1.32x -> 1.40x plain). On the
        suites' greedy outputs the 0.5B draft's second choice was the 1.5B target's token at
        47-80 % of the positions where its first was not (`benchmarks/HISTORY.md`)."""
        k = min(k, depth)
        if k <= 0 or not self._can_read(tokens):
            return TreeDraft([], [], 0, self.name)
        logits = self.draft.sync(tokens)
        main: list[int] = []
        leaves: list[tuple[float, int, int]] = []  # (score, depth, token)
        reach = 1.0
        while True:
            (first, p1), (second, p2) = top_two(logits)
            leaves.append((reach * p2, len(main), second))
            if self._stops(len(main), p1, reach * p1):
                leaves.append((reach * p1, len(main), first))
                break
            main.append(first)
            reach *= p1
            if len(main) == k:
                break
            logits = self.draft.decode([first], 1)[0]
        chosen = heapq.nlargest(min(width - 1, nodes - len(main)), leaves)
        return TreeDraft.build(main, [(at, [tok]) for _, at, tok in chosen], self.name)

    def commit(self, tokens: Sequence[int]) -> None:
        self.draft.commit(tokens)

    def end(self) -> None:
        pass


def top_two(logits: np.ndarray) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two likeliest tokens of a row of logits, each with its probability (softmax)."""
    two = np.argpartition(logits, -2)[-2:]
    second, first = (int(t) for t in two[np.argsort(logits[two], kind="stable")])
    weights = np.exp(logits.astype(np.float64) - logits[first])
    total = float(weights.sum())
    return (first, 1.0 / total), (second, float(weights[second]) / total)


class HybridDrafter:
    """N-gram lookup when the context offers a match (free), the draft model otherwise."""

    name = "hybrid"

    def __init__(self, ngram: Drafter, model: ModelDrafter | None) -> None:
        self.ngram = ngram  # a lookup: NgramDrafter, or auto's SuffixDrafter
        self.model = model

    def begin(self, tokens: Sequence[int]) -> None:
        self.ngram.begin(tokens)
        if self.model is not None:
            self.model.begin(tokens)

    def _model_options(self, tokens: Sequence[int], room: int) -> list[Option]:
        return self.model.options(tokens, room) if self.model is not None else []

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        return self.ngram.options(tokens, room) or self._model_options(tokens, room)

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        draft = self.ngram.propose(tokens, k, sampler)
        if draft.tokens or self.model is None:
            return draft
        return self.model.propose(tokens, k, sampler)

    def commit(self, tokens: Sequence[int]) -> None:
        self.ngram.commit(tokens)
        if self.model is not None:
            self.model.commit(tokens)

    def end(self) -> None:
        self.ngram.end()
        if self.model is not None:
            self.model.end()


class EitherDrafter(HybridDrafter):
    """Both n-gram lookup and (when there is one) the draft model on offer every round, for a
    policy that weighs them against each other: the drafters behind `auto`."""

    name = "auto"

    def __init__(self, ngram: Drafter, model: ModelDrafter | None = None) -> None:
        super().__init__(ngram, model)

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        return self.ngram.options(tokens, room) + self._model_options(tokens, room)
