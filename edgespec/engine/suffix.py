"""Suffix memory: free drafts from what followed the context's suffix anywhere in the prompt,
in everything generated earlier in this session, and (opt-in, `--memory DIR`) in a project's
past sessions.

Prompt lookup (`NgramDrafter`) copies what followed the *last* occurrence of the longest
matching n-gram. Here every occurrence counts, as in SuffixDecoding (Oliaro et al., 2024): each
n-gram keeps how often each token followed it; a draft follows the most frequent continuation
token by token, matching the longest suffix again after each, and stops where the evidence
thins (the best continuation followed less than MIN_SHARE of the occurrences) or runs out. So
the draft's length comes from the match and its counts, and the tenth edit of a file drafts from
the nine before it.

Where the context's last MAX_N tokens occurred before, the draft instead copies what followed
them: of their few most recent places, the ones whose match reaches furthest back, as far as
these agree. A copy (an edited file, a quoted passage) follows one source, and re-voting after
every token let other occurrences of a common n-gram pull the draft off it; where equally good
places disagree at once (a log's repeated timestamps) the counts decide as before. On the greedy
outputs of the built-in suites and of 10 held-out edits, a 48-token draft at such a match held
on average 26.1 tokens the target took on code editing (22.1 re-voting), 18-34 in the
multi-turn sessions (15-25), 19.3 on the held-out longer files (14.4); 12.5 on summarization
(12.8) and 4.4 on code generation (4.5).

A copy makes again the replacements the answer made to its source (`Edits`): a function renamed
at its first occurrence is renamed in the draft at the next, where the unchanged copy broke and
then needed 8 tokens to match its source again. The replacements the instruction names
("rename `a` to `b`", hints.py) it makes from the first occurrence on (`expect`). And where the
answer, having left its source at an edit, matches it again by a few tokens just past where it
left, the copy takes it up there (`Edits.resume`) instead of waiting for a full-length match.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from edgespec.engine.drafters import Option
from edgespec.engine.sampling import Sampler
from edgespec.engine.tree import TreeDraft, branch_lengths
from edgespec.engine.verify import EMPTY_DRAFT, Draft
from edgespec.options import K_MAX, TREE_WIDTH

MAX_N = 8
MIN_N = 2
MIN_SHARE = 0.5
# Tree drafts branch where another continuation followed at least this share of the occurrences.
FORK_SHARE = 0.1
FORK_CANDIDATES = 3  # per position
TREE_FORKS = TREE_WIDTH - 1  # forks offered: one branch each
SESSION_TOKENS = 1 << 18  # earlier generations kept in the session index, newest first
CLIENTS = 64  # the most recent clients whose session indexes a server keeps
COPY_MIN = 8  # the shortest match a copy follows: shorter ones recur by chance
COPY_SOURCES = 4  # the most recent occurrences of a full-length match a copy may follow
COPY_REACH = 64  # how far back a copy's match is compared, to choose among them
EDIT_MAX = 8  # the longest span of a copy's source, or of what replaced it, learned as an edit
# An edit that mostly inserts (a type hint after a parameter, a docstring) belongs to its place;
# one that replaces by about as much (a rename, a changed constant) recurs. Replayed on 16
# held-out edits, a type hint learned from ")" -> ": str) -> dict:" and made at the next ")"
# lost 5 % where verifying is steep; limits of 1, 2 and 3 tokens replay the same.
EDIT_GROWTH = 2
# Where the output leaves a copy's source (an edit), it mostly takes it up again a few tokens
# later. Its last tokens then match the source just past where it left, but fewer of them than
# a copy needs (COPY_MIN): priced as any short lookup (often a chance match), such a draft waited
# for COPY_MIN tokens at every edit. On the greedy outputs of the built-in suites and of the
# held-out ones, where the last 3 or more tokens matched the source within 8 tokens past where
# the output left it, the next token was the source's at 80-100 % of those places in the editing
# suites (17-21 tokens held on average; 2 of 6 in code generation). `auto` prices them apart
# ("ngram-resume"): replayed with the tau of the two EPYC kinds, code editing +4 % and +3 %,
# the editing sessions' turns -0.4 to +7.5 %; run live here, two runs, code editing +1 % and
# +3 %, the held-out edits +5 % and +4 % (benchmarks/HISTORY.md).
RESUME_WINDOW = 8
RESUME_MIN = 3


class SuffixIndex:
    """For every n-gram (n = 1..max_n) of the documents added: the tokens that followed it and
    how often; for the max_n-grams also where (document, position after it). N-grams never
    cross from one document into the next."""

    def __init__(self, max_n: int = MAX_N) -> None:
        self.max_n = max_n
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
        return [(self.docs[d], j) for d, j in self.places.get(key, [])[-COPY_SOURCES:][::-1]]


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


def _reach(context: Sequence[int], doc: Sequence[int], at: int, most: int = COPY_REACH) -> int:
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

    def __init__(self, learn: bool = True) -> None:
        self.learn = learn  # learn edits from the output (else only those it is told of)
        # first token -> the source's tokens -> what replaced them
        self.by_first: dict[int, dict[tuple[int, ...], list[int]]] = {}
        # The last copy's source, its offset from the context, the context's length then, and
        # where the stretch the context copied from the source at that offset began.
        self._trail: tuple[Sequence[int], int, int, int] | None = None

    def expect(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Edits known before the output makes them (what the instruction asks to replace,
        hints.py): (the source's tokens, what replaces them)."""
        for old, new in pairs:
            if old and tuple(old) != tuple(new):
                self.by_first.setdefault(old[0], {})[tuple(old)] = list(new)

    def track(self, context: Sequence[int], doc: Sequence[int], at: int, reach: int) -> None:
        """A copy from `doc[at]` whose match reaches `reach` tokens back: compare the context
        since the last copy with what the same source said."""
        n = len(context)
        trail, self._trail = self._trail, (doc, at - n, n, n - reach)
        if trail is None or trail[0] is not doc:
            return
        _, offset, start, since = trail
        j = _copied_until(context, doc, offset, start)
        self._forget_kept(context, since, start, j)
        if j == n and at - n == offset:  # still the same stretch
            self._trail = (doc, offset, n, since)
        resumed = n - reach  # where the match that found this copy begins in the context
        replaced, by = doc[j + offset : at - reach], context[j:resumed]
        if (
            self.learn
            and j < resumed
            and reach < COPY_REACH  # else the match began before the copy left its source
            and 0 < len(replaced) <= EDIT_MAX
            and len(by) <= min(EDIT_MAX, len(replaced) + EDIT_GROWTH)
        ):
            self.by_first.setdefault(replaced[0], {})[tuple(replaced)] = list(by)

    def resume(self, context: Sequence[int]) -> tuple[Sequence[int], int, int] | None:
        """Where the context takes up again the source the last copy followed, after leaving
        it: of the places up to RESUME_WINDOW tokens past where it left, the one whose tokens
        before match the context's last ones furthest (at least RESUME_MIN, fewer than a copy
        needs), the nearest on a tie. (source, position after the match, match) or None."""
        if self._trail is None:
            return None
        doc, offset, then, _ = self._trail
        n = len(context)
        j = _copied_until(context, doc, offset, then)
        if j == n or not 0 <= j + offset < len(doc):
            return None  # still on the source (or past its end): nothing to take up
        left = j + offset
        best, at = RESUME_MIN - 1, -1
        # A place at the source's end has nothing to copy; in the live context that is the
        # context itself.
        for q in range(left, min(left + RESUME_WINDOW, len(doc) - 1) + 1):
            m = _reach(context, doc, q, COPY_MIN - 1)
            if m > best:
                best, at = m, q
        return (doc, at, best) if at >= 0 else None

    def _forget_kept(self, context: Sequence[int], since: int, start: int, end: int) -> None:
        """Edits whose source tokens the context copied unchanged (in the stretch copied from
        `since` to `end`, ending after `start`): they are not made everywhere."""
        for i in range(max(since, start - EDIT_MAX + 1), end):
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


def _by_count(item: tuple[int, int]) -> tuple[int, int]:
    return item[1], -item[0]  # the most frequent; on a tie the smaller id, for determinism


class SuffixDrafter:
    """Frequency-scored continuations from the live context and the session's earlier texts."""

    name = "ngram"  # to users and to the policy: free drafts from text already seen

    def __init__(
        self,
        max_n: int = MAX_N,
        min_n: int = MIN_N,
        past: Sequence[Sequence[int]] = (),
        on_done: Callable[[list[int]], None] | None = None,
        resume: bool = True,
        learn_edits: bool = True,
    ) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n
        self.past = [list(doc) for doc in past]  # from the persistent memory
        self._past_tokens = 0  # how much of the session index is the persistent memory
        self.session = self._fresh_session()  # + earlier generations of this session
        # Other clients' sessions (a server's), the least recently served first.
        self._clients: OrderedDict[Hashable, SuffixIndex] = OrderedDict()
        self._client: Hashable = None
        self.live = SuffixIndex(max_n)
        self._on_done = on_done  # a finished generation's tokens (to a persistent memory)
        self._committed: Sequence[int] = ()  # the live generation's tokens, as last committed
        # This round's continuation and its forks, at which context length.
        self._offered: tuple[int, list[int], list[Fork]] = (-1, [], [])
        self.learn_edits = learn_edits  # copies make again the edits the output made (`Edits`)
        self.edits = Edits(learn_edits)
        self._expected: list[tuple[list[int], list[int]]] = []  # for every generation's edits
        self.resume = resume  # take up a copy's source again after an edit (`Edits.resume`)

    def _fresh_session(self) -> SuffixIndex:
        index = SuffixIndex(self.max_n)
        for doc in self.past:
            index.add(doc)
        self._past_tokens = index.tokens
        return index

    def remember(self, docs: Sequence[Sequence[int]]) -> None:
        """Earlier texts of this session (what a benchmark replays before a later turn)."""
        for doc in docs:
            self.session.add(list(doc))

    def serve(self, client: Hashable) -> None:
        """Draft from, and add to, the earlier texts of `client` only: a server's clients do
        not draft from each other's prompts and answers (whose effect on speed, and on the
        counts in every answer, would tell one client about another's texts)."""
        if client == self._client:
            return
        self._clients[self._client] = self.session
        self._clients.move_to_end(self._client)
        known = self._clients.pop(client, None)
        self.session = known if known is not None else self._fresh_session()
        self._client = client
        while len(self._clients) > CLIENTS:
            self._clients.popitem(last=False)

    def forget(self) -> None:
        """Back to what the persistent memory holds (a new conversation; each bench run)."""
        self._expected = []
        self.begin(())
        self.session = self._fresh_session()

    # --- lookups ---------------------------------------------------------------------------

    def _follows(self, seq: Sequence[int]) -> tuple[int, dict[int, int] | None]:
        """The longest suffix of `seq` seen before (length, what followed it): in the live
        context if it is there, else in the session's earlier texts. An edited file is in both
        (this turn's prompt, the earlier turns' versions): counted together, the older versions
        outvote the live one at every edit made since. Replayed on the multi-turn editing suite
        (scripts/replay_policy.py), the live context first made no turn slower and some faster:
        up to 11 % with this project's CPU's tau, 23 % with a flat one."""
        for n in range(min(self.max_n, len(seq)), self.min_n - 1, -1):
            key = tuple(seq[len(seq) - n :])
            found = self.live.follows(key) or self.session.follows(key)
            if found:
                return n, found
        return 0, None

    def _continue(self, tokens: Sequence[int], k: int) -> tuple[list[int], int, list[Fork], bool]:
        """Up to k tokens following `tokens` (the context: indexed first), the match length of
        the first, the forks along them (most likely first), and whether they take up again
        a source that a copy left."""
        if len(tokens) > self.live.tokens:
            self.live.add(tokens, self.live.tokens)
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
        if self.max_n < COPY_MIN or len(tokens) < self.max_n or k <= 0:
            return None, 0, False
        key = tuple(tokens[-self.max_n :])
        places = [*self.live.sources(key), *self.session.sources(key)][:COPY_SOURCES]
        reach = [_reach(tokens, doc, at) for doc, at in places]
        furthest = max(reach, default=0)
        ties: list[tuple[Sequence[int], int]] = [
            place for place, r in zip(places, reach, strict=True) if r == furthest
        ]
        resumed = False
        if ties:
            self.edits.track(tokens, *ties[0], furthest)
            match = furthest
        else:
            taken_up = self.edits.resume(tokens) if self.resume else None
            if taken_up is None:
                return None, 0, False
            doc, at, match = taken_up
            ties, resumed = [(doc, at)], True
        copy = self.edits.apply(_agreed([doc[at : at + k + EDIT_MAX] for doc, at in ties]), k)
        return (copy, match, resumed) if copy else (None, 0, False)

    def _walk(
        self, context: Sequence[int], k: int, guide: Sequence[int] | None = None
    ) -> tuple[list[int], int, list[Fork]]:
        """Follow the most frequent continuation, or the `guide` (a copy) where given; the
        counts along the way give the forks."""
        seq = list(context[-self.max_n :])
        out: list[int] = []
        forks: list[Fork] = []
        first_match, chance = 0, 1.0
        while len(out) < (k if guide is None else min(k, len(guide))):
            n, found = self._follows(seq)
            if found:
                total = sum(found.values())
                ranked = heapq.nlargest(FORK_CANDIDATES + 1, found.items(), key=_by_count)
                tok = ranked[0][0] if guide is None else guide[len(out)]
                count = found.get(tok, 0)
                follows = guide is not None or count >= MIN_SHARE * total
                for alt, alt_count in ranked:
                    if alt != tok and alt_count >= FORK_SHARE * total and chance > 0:
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

    def expect(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Replacements the next generations' copies make from the start (`Edits.expect`):
        what the instruction asks for; () for none."""
        self._expected = [(list(old), list(new)) for old, new in pairs]

    def begin(self, tokens: Sequence[int]) -> None:
        self.live = SuffixIndex(self.max_n)
        self._offered = (-1, [], [])
        self.edits = Edits(self.learn_edits)
        self.edits.expect(self._expected)
        self._committed = ()

    def options(self, tokens: Sequence[int], room: int) -> list[Option]:
        # No policy drafts more than K_MAX: a longer continuation would cost a lookup per token
        # every round for nothing (about 1 ms per round for 500 tokens).
        found, match, forks, resumed = (
            self._continue(tokens, min(room, K_MAX)) if room > 0 else ([], 0, [], False)
        )
        self._offered = (len(tokens), found, forks)
        if not found and not forks:
            return []
        # A fork where the main chain ended (or before it began) is only on offer as a tree.
        depths = tuple(f.depth for f in forks[:TREE_FORKS])
        first = found[0] if found else None
        return [
            Option(
                self, self.name, len(found), True, match, next=first, forks=depths,
                resumed=resumed,
            )
        ]  # fmt: skip

    def _offer(self, tokens: Sequence[int], k: int) -> tuple[list[int], list[Fork]]:
        """This round's whole continuation (what options() found, or a new lookup of up to k
        tokens) and its forks."""
        at, offered, forks = self._offered
        if at == len(tokens) and k <= len(offered):
            return offered, forks
        found, _, forks, _ = self._continue(tokens, k) if k > 0 else ([], 0, [], False)
        return found, forks

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        found = self._offer(tokens, k)[0][:k]
        return Draft(found, None, self.name) if found else EMPTY_DRAFT

    def propose_tree(
        self, tokens: Sequence[int], k: int, nodes: int, width: int, depth: int
    ) -> TreeDraft:
        continuation, forks = self._offer(tokens, k)
        main = continuation[:k]
        # A fork at the main chain's end is a branch only where the continuation stopped there
        # by itself (else the continuation's own next token is likelier).
        usable = [
            f
            for f in forks
            if f.depth < depth
            and (f.depth < len(main) or f.depth == len(main) == len(continuation))
        ][: width - 1]
        branches = []
        lengths = branch_lengths(nodes - len(main), len(usable))
        for fork, length in zip(usable, lengths, strict=True):
            length = min(length, depth - fork.depth)
            if length > 0:
                context = [*tokens[-self.max_n :], *main[: fork.depth], fork.token]
                rest = self._walk(context, length - 1)[0]
                branches.append((fork.depth, [fork.token, *rest]))
        return TreeDraft.build(main, branches, self.name)

    def commit(self, tokens: Sequence[int]) -> None:
        self._committed = tokens  # the engine commits once more, all of them, before end()

    def end(self) -> None:
        """The generation joins the session's texts (and the persistent memory)."""
        doc, self._committed = list(self._committed), ()
        if len(doc) > 1:
            # Only this session's own texts count: a memory bigger than the cap alone would
            # otherwise be indexed again after every generation.
            if self.session.tokens - self._past_tokens > SESSION_TOKENS:
                self.session = self._fresh_session()  # start over rather than grow forever
            self.session.add(doc)
            if self._on_done is not None:
                self._on_done(doc)
