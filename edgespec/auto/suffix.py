"""Drafts from what followed the context's suffix before (SuffixDecoding, Oliaro et al. 2024),
or a copy of one source (not re-voted per token) where the last `max_n` tokens occurred before."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from edgespec.auto.config import AUTO, SuffixConfig
from edgespec.auto.edits import Edits, matched_before
from edgespec.auto.index import Keep, SuffixMemory
from edgespec.engine.drafters import Lookup, Proposal
from edgespec.engine.tree import TreeDraft, branch_lengths
from edgespec.options import ALL_ON, K_MAX, AutoSwitches


def _agreed(copies: Sequence[Sequence[int]]) -> list[int]:
    n = min(map(len, copies), default=0)
    for i in range(n):
        if any(c[i] != copies[0][i] for c in copies):
            return list(copies[0][:i])
    return list(copies[0][:n]) if copies else []


class Fork(NamedTuple):
    """Another continuation: `token` instead of the main chain's token at `depth`."""

    chance: float
    depth: int
    token: int


@dataclass(frozen=True)
class Branches:
    drafter: SuffixDrafter
    context: tuple[int, ...]
    forks: tuple[Fork, ...]

    def tree(self, lookup: Lookup, k: int, nodes: int, width: int, depth: int) -> TreeDraft:
        continuation = lookup.continuation
        main = continuation[:k]
        # A fork at the chain's end only where the continuation stopped there by itself.
        usable = [
            f
            for f in self.forks
            if f.depth < depth
            and (f.depth < len(main) or f.depth == len(main) == len(continuation))
        ][: width - 1]
        branches = []
        lengths = branch_lengths(nodes - len(main), len(usable))
        for fork, length in zip(usable, lengths, strict=True):
            length = min(length, depth - fork.depth)
            if length > 0:
                context = [*self.context, *main[: fork.depth], fork.token]
                branches.append(
                    (fork.depth, [fork.token, *self.drafter.branch(context, length - 1)])
                )
        return TreeDraft.build(main, branches, lookup.source)


def _by_count(item: tuple[int, int]) -> tuple[int, int]:
    return item[1], -item[0]  # on a tie the smaller id, for determinism


class SuffixDrafter:
    """One generation's drafter, from `client`'s session of the `memory` (else its own)."""

    name = "suffix"

    def __init__(
        self,
        config: SuffixConfig = AUTO.suffix,
        past: Sequence[Sequence[int]] = (),
        on_done: Keep | None = None,
        *,
        switches: AutoSwitches = ALL_ON,
        memory: SuffixMemory | None = None,
        client: Hashable = None,
        hints: Sequence[tuple[Sequence[int], Sequence[int]]] = (),
    ) -> None:
        if not 1 <= config.min_n <= config.max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.config = config
        self.max_n, self.min_n = config.max_n, config.min_n
        self.memory = memory if memory is not None else SuffixMemory(config, past, on_done)
        self.client = client
        self._switches = switches
        self._hints = [(list(old), list(new)) for old, new in hints]
        self.session = self.memory.session(client)
        self.live = self.memory.index()
        self.edits = Edits(config, switches.edits)
        self._committed: Sequence[int] = ()

    @property
    def switches(self) -> AutoSwitches:
        return self._switches

    def _follows(self, seq: Sequence[int]) -> tuple[int, dict[int, int] | None]:
        """The longest suffix of `seq` seen before and what followed it: in the live context
        first, else older versions of an edited file would outvote it at every edit."""
        for n in range(min(self.max_n, len(seq)), self.min_n - 1, -1):
            key = tuple(seq[len(seq) - n :])
            found = self.live.follows(key) or self.session.follows(key)
            if found:
                return n, found
        return 0, None

    def _copy(self, tokens: Sequence[int], k: int) -> tuple[list[int] | None, int, bool]:
        """Up to k tokens copied from the places whose match reaches furthest back, as far as
        they agree (None where they disagree at once: a log's timestamps), and that reach."""
        config = self.config
        ties, furthest = self._places(tokens)
        resumed = False
        if ties:
            match = furthest
        else:
            taken_up = self.edits.resume(tokens) if self._switches.resume else None
            if taken_up is None:
                return None, 0, False
            doc, at, match = taken_up
            ties, resumed = [(doc, at)], True
        span = k + config.edit_max
        copy = self.edits.apply(_agreed([doc[at : at + span] for doc, at in ties]), k)
        return (copy, match, resumed) if copy else (None, 0, False)

    def _places(self, tokens: Sequence[int]) -> tuple[list[tuple[Sequence[int], int]], int]:
        config = self.config
        if self.max_n < config.copy_min or len(tokens) < self.max_n:
            return [], 0
        key = tuple(tokens[-self.max_n :])
        places = [*self.live.sources(key), *self.session.sources(key)][: config.copy_sources]
        reach = [matched_before(tokens, doc, at, config.copy_reach) for doc, at in places]
        furthest = max(reach, default=0)
        ties: list[tuple[Sequence[int], int]] = [
            place for place, r in zip(places, reach, strict=True) if r == furthest
        ]
        return ties, furthest

    def _walk(
        self, context: Sequence[int], k: int, guide: Sequence[int] | None = None
    ) -> tuple[list[int], int, list[Fork]]:
        seq = list(context[-self.max_n :])
        config = self.config
        out: list[int] = []
        forks: list[Fork] = []
        first_match, chance = 0, 1.0
        while len(out) < (k if guide is None else min(k, len(guide))):
            n, found = self._follows(seq)
            if found:
                total = sum(found.values())
                ranked = heapq.nlargest(config.fork_candidates + 1, found.items(), key=_by_count)
                tok = ranked[0][0] if guide is None else guide[len(out)]
                count = found.get(tok, 0)
                follows = guide is not None or count >= config.min_share * total
                for alt, alt_count in ranked:
                    if alt != tok and alt_count >= config.fork_share * total and chance > 0:
                        forks.append(Fork(chance * alt_count / total, len(out), alt))
                if not follows:
                    break
                chance *= count / total
                first_match = first_match or n
            elif guide is None:
                break
            else:  # an edit's tokens may be new: a copy goes on without counts
                tok = guide[len(out)]
            out.append(tok)
            seq = [*seq[1:], tok] if len(seq) >= self.max_n else [*seq, tok]
        forks.sort(key=lambda f: -f.chance)
        return out, first_match, forks

    def begin(self, tokens: Sequence[int]) -> None:
        self.session = self.memory.session(self.client)
        self.live = self.memory.index()
        self.edits = Edits(self.config, self._switches.edits)
        self.edits.expect(self._hints)
        self._committed = ()
        self._index(tokens)

    def _index(self, tokens: Sequence[int]) -> None:
        if len(tokens) <= self.live.tokens:
            return
        self.live.add(tokens, self.live.tokens)
        ties, furthest = self._places(tokens)
        if ties:
            self.edits.track(tokens, *ties[0], furthest)

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        if room <= 0:
            return []
        # No policy drafts more than K_MAX: a longer walk would cost a lookup per token.
        k = min(room, K_MAX)
        copy, reach, resumed = self._copy(tokens, k)
        found, match, forks = self._walk(tokens[-self.max_n :], k, copy)
        if not found and not forks:
            return []
        depths = tuple(f.depth for f in forks[: self.config.tree_forks])
        branches = Branches(self, tuple(tokens[-self.max_n :]), tuple(forks))
        return [Lookup(tuple(found), max(match, reach), self.name, resumed, depths, branches)]

    def branch(self, context: Sequence[int], length: int) -> list[int]:
        return self._walk(context, length)[0]

    def commit(self, tokens: Sequence[int]) -> None:
        self._committed = tokens  # the engine commits all of them before end()
        self._index(tokens)

    def end(self) -> None:
        doc, self._committed = list(self._committed), ()
        if len(doc) > 1:
            self.memory.add(self.client, doc)
