"""Suffix memory: free drafts from what followed the context's suffix anywhere in the prompt,
in everything generated earlier in this session, and (opt-in, `--memory DIR`) in a project's
past sessions.

Prompt lookup (`NgramDrafter`) copies what followed the *last* occurrence of the longest
matching n-gram. Here every occurrence counts, as in SuffixDecoding (Oliaro et al., 2024): each
n-gram keeps how often each token followed it; a draft follows the most frequent continuation
token by token, matching the longest suffix again after each, and stops where the evidence
thins (the best continuation followed less than `min_share` of the occurrences) or runs out. So
the draft's length comes from the match and its counts, and the tenth edit of a file drafts from
the nine before it.

Where the context's last `max_n` tokens occurred before, the draft instead copies what followed
them: of their few most recent places, the ones whose match reaches furthest back, as far as
these agree. A copy (an edited file, a quoted passage) follows one source, and re-voting after
every token let other occurrences of a common n-gram pull the draft off it; where equally good
places disagree at once (a log's repeated timestamps) the counts decide as before.

A copy makes again the replacements the answer made to its source (`Edits`): a function renamed
at its first occurrence is renamed in the draft at the next, where the unchanged copy broke and
then needed 8 tokens to match its source again. The replacements the instruction names
("rename `a` to `b`", hints.py) it makes from the first occurrence on (`expect`). And where the
answer, having left its source at an edit, matches it again by a few tokens just past where it
left, the copy takes it up there (`Edits.resume`) instead of waiting for a full-length match.

Every constant is in `SuffixConfig` (config.py), with where it comes from.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from edgespec.auto.config import AUTO, SuffixConfig
from edgespec.engine.drafters import Lookup, Proposal
from edgespec.engine.tree import TreeDraft, branch_lengths
from edgespec.options import ALL_ON, K_MAX, AutoSwitches


@dataclass(frozen=True)
class Trail:
    """The last copy: its source, its offset from the context, the context's length then, and
    where the stretch the context copied from the source at that offset began."""

    doc: Sequence[int]
    offset: int
    length: int
    since: int


class SuffixIndex:
    """For every n-gram (n = 1..max_n) of the documents added: the tokens that followed it and
    how often; for the max_n-grams also where (document, position after it). N-grams never
    cross from one document into the next."""

    def __init__(self, max_n: int, sources: int) -> None:
        self.max_n = max_n
        self.copy_sources = sources  # the most recent places of a max_n-gram kept for copies
        self.tables: list[dict[tuple[int, ...], dict[int, int]]] = [{} for _ in range(max_n + 1)]
        self.docs: list[list[int]] = []
        self.places: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        self.tokens = 0

    def add(self, doc: Sequence[int], start: int = 0) -> None:
        """Index the tokens of `doc` from position `start` on (each with what precedes it); a
        `start` past 0 continues the document added last (the live context, as it grows)."""
        if start == 0 or not self.docs:
            self.docs.append([])
        self.docs[-1].extend(doc[len(self.docs[-1]) :])
        here = len(self.docs) - 1
        for j in range(max(start, 1), len(doc)):
            nxt = doc[j]
            for n in range(1, min(self.max_n, j) + 1):
                follow = self.tables[n].setdefault(tuple(doc[j - n : j]), {})
                follow[nxt] = follow.get(nxt, 0) + 1
            if j >= self.max_n:
                self.places.setdefault(tuple(doc[j - self.max_n : j]), []).append((here, j))
        self.tokens += max(0, len(doc) - start)

    def follows(self, key: tuple[int, ...]) -> dict[int, int] | None:
        return self.tables[len(key)].get(key)

    def sources(self, key: tuple[int, ...]) -> list[tuple[list[int], int]]:
        """The most recent places a max_n-gram was followed: (document, position after it)."""
        recent = self.places.get(key, [])[-self.copy_sources :][::-1]
        return [(self.docs[d], j) for d, j in recent]


def _agreed(copies: Sequence[Sequence[int]]) -> list[int]:
    """The tokens all copies start with."""
    n = min(map(len, copies), default=0)
    for i in range(n):
        if any(c[i] != copies[0][i] for c in copies):
            return list(copies[0][:i])
    return list(copies[0][:n]) if copies else []


def _copied_until(context: Sequence[int], doc: Sequence[int], offset: int, j: int) -> int:
    """The first position from j on where the context no longer equals `doc` read at
    `offset` (len(context) where it still does, or where the source ends)."""
    while j < len(context) and 0 <= j + offset < len(doc) and context[j] == doc[j + offset]:
        j += 1
    return j


def _reach(context: Sequence[int], doc: Sequence[int], at: int, most: int) -> int:
    """How many tokens before `doc[at]` equal the context's last ones (at most `most`)."""
    n = 0
    while n < min(most, at, len(context)) and doc[at - 1 - n] == context[-1 - n]:
        n += 1
    return n


class Edits:
    """What the live output put in place of a copied source's tokens (a renamed function, a
    changed constant), made again where a later copy meets the same tokens. An edit is learned
    where a copy takes up its source again after leaving it (the tokens between, on both sides)
    and forgotten where the output copied the source's tokens unchanged after all."""

    def __init__(self, config: SuffixConfig = AUTO.suffix, learn: bool = True) -> None:
        self.config = config
        self.learn = learn  # learn edits from the output (else only those it is told of)
        # first token -> the source's tokens -> what replaced them
        self.by_first: dict[int, dict[tuple[int, ...], list[int]]] = {}
        self._trail: Trail | None = None

    def expect(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Edits known before the output makes them (what the instruction asks to replace,
        hints.py): (the source's tokens, what replaces them)."""
        for old, new in pairs:
            if old and tuple(old) != tuple(new):
                self.by_first.setdefault(old[0], {})[tuple(old)] = list(new)

    def track(self, context: Sequence[int], doc: Sequence[int], at: int, reach: int) -> None:
        """A copy from `doc[at]` whose match reaches `reach` tokens back: compare the context
        since the last copy with what the same source said."""
        n, config = len(context), self.config
        trail, self._trail = self._trail, Trail(doc, at - n, n, n - reach)
        if trail is None or trail.doc is not doc:
            return
        offset, since = trail.offset, trail.since
        j = _copied_until(context, doc, offset, trail.length)
        self._forget_kept(context, since, trail.length, j)
        if j == n and at - n == offset:  # still the same stretch
            self._trail = Trail(doc, offset, n, since)
        resumed = n - reach  # where the match that found this copy begins in the context
        replaced, by = doc[j + offset : at - reach], context[j:resumed]
        if (
            self.learn
            and j < resumed
            and reach < config.copy_reach  # else the match began before the copy left its source
            and 0 < len(replaced) <= config.edit_max
            and len(by) <= min(config.edit_max, len(replaced) + config.edit_growth)
        ):
            self.by_first.setdefault(replaced[0], {})[tuple(replaced)] = list(by)

    def resume(self, context: Sequence[int]) -> tuple[Sequence[int], int, int] | None:
        """Where the context takes up again the source the last copy followed, after leaving
        it: of the places up to `resume_window` tokens past where it left, the one whose tokens
        before match the context's last ones furthest (at least `resume_min`, fewer than a copy
        needs), the nearest on a tie. (source, position after the match, match) or None."""
        if self._trail is None:
            return None
        doc, offset, config = self._trail.doc, self._trail.offset, self.config
        n = len(context)
        j = _copied_until(context, doc, offset, self._trail.length)
        if j == n or not 0 <= j + offset < len(doc):
            return None  # still on the source (or past its end): nothing to take up
        left = j + offset
        best, at = config.resume_min - 1, -1
        # A place at the source's end has nothing to copy; in the live context that is the
        # context itself.
        for q in range(left, min(left + config.resume_window, len(doc) - 1) + 1):
            m = _reach(context, doc, q, config.copy_min - 1)
            if m > best:
                best, at = m, q
        return (doc, at, best) if at >= 0 else None

    def _forget_kept(self, context: Sequence[int], since: int, start: int, end: int) -> None:
        """Edits whose source tokens the context copied unchanged (in the stretch copied from
        `since` to `end`, ending after `start`): they are not made everywhere."""
        for i in range(max(since, start - self.config.edit_max + 1), end):
            known = self.by_first.get(context[i], {})
            for old in [e for e in known if start < i + len(e) <= end]:
                if tuple(context[i : i + len(old)]) == old:
                    del known[old]

    def apply(self, copy: Sequence[int], k: int) -> list[int]:
        """`copy` with the learned edits made, up to k tokens; it ends before an edit's tokens
        that it holds only in part."""
        out: list[int] = []
        i = 0
        while i < len(copy) and len(out) < k:
            for old, new in self.by_first.get(copy[i], {}).items():
                if tuple(copy[i : i + len(old)]) == old:
                    out.extend(new)
                    i += len(old)
                    break
                if len(copy) - i < len(old) and tuple(copy[i:]) == old[: len(copy) - i]:
                    return out[:k]
            else:
                out.append(copy[i])
                i += 1
        return out[:k]


class Fork(NamedTuple):
    """Another continuation: `token` instead of the main chain's token at `depth`."""

    chance: float  # how often the text went this way, times the chance of getting there
    depth: int
    token: int


@dataclass(frozen=True)
class Branches:
    """A lookup's other continuations and where to follow them: its tree draft's branches."""

    drafter: SuffixDrafter
    context: tuple[int, ...]  # the context's last tokens, as far as an n-gram reaches
    forks: tuple[Fork, ...]

    def tree(self, lookup: Lookup, k: int, nodes: int, width: int, depth: int) -> TreeDraft:
        continuation = lookup.continuation
        main = continuation[:k]
        # A fork at the main chain's end is a branch only where the continuation stopped there
        # by itself (else the continuation's own next token is likelier).
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
    return item[1], -item[0]  # the most frequent; on a tie the smaller id, for determinism


class Layers:
    """The earlier texts one client drafts from: its own session's index on top of the
    persistent memory's, which every client shares and none writes (indexed once, however many
    clients come). Read as one index holding both, the memory's texts added first."""

    def __init__(self, own: SuffixIndex, past: SuffixIndex) -> None:
        self.own = own
        self.past = past

    @property
    def tokens(self) -> int:
        return self.own.tokens + self.past.tokens

    def follows(self, key: tuple[int, ...]) -> dict[int, int] | None:
        own, past = self.own.follows(key), self.past.follows(key)
        if not (own and past):
            return own or past
        merged = dict(past)
        for token, count in own.items():
            merged[token] = merged.get(token, 0) + count
        return merged

    def sources(self, key: tuple[int, ...]) -> list[tuple[list[int], int]]:
        """The most recent places first: the session's texts came after the memory's."""
        return [*self.own.sources(key), *self.past.sources(key)][: self.own.copy_sources]


class SuffixMemory:
    """What the suffix drafter keeps across generations: the persistent memory's texts, indexed
    once, and each client's session of earlier generations on top of them (a server's clients
    do not draft from each other's prompts and answers, whose effect on speed, and on the counts
    in every answer, would tell one client about another's texts). A new client's session starts
    empty, so it costs nothing to start; the sessions together hold at most
    `config.clients_tokens` tokens of their own (the least recently served go first)."""

    def __init__(
        self,
        config: SuffixConfig = AUTO.suffix,
        past: Sequence[Sequence[int]] = (),
        on_done: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.config = config
        self._past = self.index()  # the persistent memory, shared by every session
        for doc in past:
            self._past.add(list(doc))
        # The clients' sessions, the least recently served first.
        self._sessions: OrderedDict[Hashable, Layers] = OrderedDict()
        self._on_done = on_done  # a finished generation's tokens (to a persistent memory)

    def index(self) -> SuffixIndex:
        return SuffixIndex(self.config.max_n, self.config.copy_sources)

    def session(self, client: Hashable = None) -> Layers:
        """The earlier texts `client` drafts from (None: the only client of a CLI or library)."""
        known = self._sessions.pop(client, None)
        self._sessions[client] = known if known is not None else Layers(self.index(), self._past)
        while len(self._sessions) > self.config.clients + 1:
            self._sessions.popitem(last=False)
        return self._sessions[client]

    def forget(self, client: Hashable = None, history: Sequence[Sequence[int]] = ()) -> None:
        """`client`'s session back to what the persistent memory holds, plus `history` (earlier
        texts of the conversation: what a benchmark replays before a later turn)."""
        own = self.index()
        for doc in history:
            own.add(list(doc))
        self._sessions.pop(client, None)
        self._sessions[client] = Layers(own, self._past)

    def add(self, client: Hashable, doc: list[int]) -> None:
        """A finished generation joins `client`'s session (and the persistent memory)."""
        session = self.session(client)
        if session.own.tokens > self.config.session_tokens:
            # Start over rather than grow forever.
            session = self._sessions[client] = Layers(self.index(), self._past)
        session.own.add(doc)
        self._bound(client)
        if self._on_done is not None:
            self._on_done(doc)

    def _bound(self, client: Hashable) -> None:
        """The least recently served other sessions dropped while all hold more than the cap."""
        held = sum(s.own.tokens for s in self._sessions.values())
        for other in list(self._sessions):
            if held <= self.config.clients_tokens:
                break
            if other != client:
                held -= self._sessions.pop(other).own.tokens


class SuffixDrafter:
    """Frequency-scored continuations from the live context and the session's earlier texts.

    One generation's drafter, to be started afresh for each (`auto/start.py`); what is kept
    across generations is the `memory`'s (else its own, from `past` and `on_done`). `client`:
    whose session it drafts from and adds to. `resume` and `learn_edits` are auto's switches:
    whether a copy takes its source up again after an edit (`Edits.resume`), and whether copies
    make again the edits the output made (`Edits`); `hints`, the replacements the request names
    (`Edits.expect`)."""

    name = "suffix"

    def __init__(
        self,
        config: SuffixConfig = AUTO.suffix,
        past: Sequence[Sequence[int]] = (),
        on_done: Callable[[list[int]], None] | None = None,
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
        self._committed: Sequence[int] = ()  # the live generation's tokens, as last committed

    @property
    def switches(self) -> AutoSwitches:
        return self._switches

    # --- lookups ---------------------------------------------------------------------------

    def _follows(self, seq: Sequence[int]) -> tuple[int, dict[int, int] | None]:
        """The longest suffix of `seq` seen before (length, what followed it): in the live
        context if it is there, else in the session's earlier texts. An edited file is in both
        (this turn's prompt, the earlier turns' versions): counted together, the older versions
        outvote the live one at every edit made since."""
        for n in range(min(self.max_n, len(seq)), self.min_n - 1, -1):
            key = tuple(seq[len(seq) - n :])
            found = self.live.follows(key) or self.session.follows(key)
            if found:
                return n, found
        return 0, None

    def _continue(self, tokens: Sequence[int], k: int) -> tuple[list[int], int, list[Fork], bool]:
        """Up to k tokens following `tokens` (the context, indexed as committed), the match
        length of the first, the forks along them (most likely first), and whether they take
        up again a source that a copy left."""
        copy, reach, resumed = self._copy(tokens, k)
        found, match, forks = self._walk(tokens[-self.max_n :], k, copy)
        return found, max(match, reach), forks, resumed

    def _copy(self, tokens: Sequence[int], k: int) -> tuple[list[int] | None, int, bool]:
        """Up to k tokens copied from where the context's last max_n tokens occurred before, and
        how far back that match reaches. Of the few most recent places (the live context's
        first), those whose match reaches furthest back, as far as what followed them agrees:
        None where they disagree at once (a log's repeated timestamps: the counts know better)
        or the tokens never occurred. Where they never occurred, the copy may take up again
        the source the last copy left (`Edits.resume`: then True)."""
        config = self.config
        if k <= 0:
            return None, 0, False
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
        """Of the few most recent places where the context's last max_n tokens occurred, those
        whose match reaches furthest back, and how far."""
        config = self.config
        if self.max_n < config.copy_min or len(tokens) < self.max_n:
            return [], 0
        key = tuple(tokens[-self.max_n :])
        places = [*self.live.sources(key), *self.session.sources(key)][: config.copy_sources]
        reach = [_reach(tokens, doc, at, config.copy_reach) for doc, at in places]
        furthest = max(reach, default=0)
        ties: list[tuple[Sequence[int], int]] = [
            place for place, r in zip(places, reach, strict=True) if r == furthest
        ]
        return ties, furthest

    def _walk(
        self, context: Sequence[int], k: int, guide: Sequence[int] | None = None
    ) -> tuple[list[int], int, list[Fork]]:
        """Follow the most frequent continuation, or the `guide` (a copy) where given; the
        counts along the way give the forks."""
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

    # --- the drafter protocol ------------------------------------------------------------------

    def begin(self, tokens: Sequence[int]) -> None:
        self.session = self.memory.session(self.client)
        self.live = self.memory.index()
        self.edits = Edits(self.config, self._switches.edits)
        self.edits.expect(self._hints)
        self._committed = ()
        self._index(tokens)

    def _index(self, tokens: Sequence[int]) -> None:
        """The context as it grows: its tokens indexed, and the copy it follows tracked for
        the edits made to its source."""
        if len(tokens) <= self.live.tokens:
            return
        self.live.add(tokens, self.live.tokens)
        ties, furthest = self._places(tokens)
        if ties:
            self.edits.track(tokens, *ties[0], furthest)

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        # No policy drafts more than K_MAX: a longer continuation would cost a lookup per token
        # every round for nothing (about 1 ms per round for 500 tokens).
        found, match, forks, resumed = (
            self._continue(tokens, min(room, K_MAX)) if room > 0 else ([], 0, [], False)
        )
        if not found and not forks:
            return []
        # A fork where the main chain ended (or before it began) is only on offer as a tree.
        depths = tuple(f.depth for f in forks[: self.config.tree_forks])
        branches = Branches(self, tuple(tokens[-self.max_n :]), tuple(forks))
        return [Lookup(tuple(found), match, self.name, resumed, depths, branches)]

    def branch(self, context: Sequence[int], length: int) -> list[int]:
        """The most frequent continuation of `context`, up to `length` tokens."""
        return self._walk(context, length)[0]

    def commit(self, tokens: Sequence[int]) -> None:
        self._committed = tokens  # the engine commits once more, all of them, before end()
        self._index(tokens)

    def end(self) -> None:
        """The generation joins the session's texts (and the persistent memory)."""
        doc, self._committed = list(self._committed), ()
        if len(doc) > 1:
            self.memory.add(self.client, doc)
