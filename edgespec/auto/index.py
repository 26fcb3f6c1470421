"""The texts the suffix drafter drafts from: n-gram counts and places, per client session."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from edgespec.auto.config import AUTO, SuffixConfig


class SuffixIndex:
    """What followed every n-gram (n <= max_n) and how often; where, for max_n-grams."""

    def __init__(self, max_n: int, sources: int) -> None:
        self.max_n = max_n
        self.copy_sources = sources
        self.tables: list[dict[tuple[int, ...], dict[int, int]]] = [{} for _ in range(max_n + 1)]
        self.docs: list[list[int]] = []
        self.places: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        self.tokens = 0

    def add(self, doc: Sequence[int], start: int = 0) -> None:
        """Index `doc` from `start` on; a `start` past 0 continues the last document added."""
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
        recent = self.places.get(key, [])[-self.copy_sources :][::-1]
        return [(self.docs[d], j) for d, j in recent]


class Layers:
    """A client's session and the persistent memory (shared, written by none) as one index."""

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
        return [*self.own.sources(key), *self.past.sources(key)][: self.own.copy_sources]


# A persistent memory's writer (tokens and whose) and reader (a client's texts of earlier runs).
Keep = Callable[[list[int], Hashable], None]
Recall = Callable[[Hashable], Sequence[Sequence[int]]]


def owner(client: Hashable) -> Hashable:
    """Who answers for a client: a server's (key, user) pair's key, else the client itself."""
    return client[0] if isinstance(client, tuple) and client else client


class SuffixMemory:
    """The persistent memory and a session per client, which drafts from its own texts only
    (the speed would tell one client of another's), starting from those of earlier runs."""

    def __init__(
        self,
        config: SuffixConfig = AUTO.suffix,
        past: Sequence[Sequence[int]] = (),
        on_done: Keep | None = None,
        recall: Recall | None = None,
    ) -> None:
        self.config = config
        self._past = self.index()
        for doc in past:
            self._past.add(list(doc))
        self._sessions: OrderedDict[Hashable, Layers] = OrderedDict()
        self._on_done = on_done
        self._recall = recall
        self._warm: dict[Hashable, SuffixIndex] = {}  # recalled ahead, by client

    def index(self) -> SuffixIndex:
        return SuffixIndex(self.config.max_n, self.config.copy_sources)

    def warm(self, client: Hashable) -> None:
        """`client`'s texts of earlier runs read and indexed now, where a session would do it
        later (a server's: within the pass's lock, seconds for a long one)."""
        if self._recall is None or client is None or client in self._sessions:
            return
        if len(self._warm) > self.config.clients:
            self._warm.clear()  # left by requests that never started
        self._warm[client] = self._recalled(client)

    def _recalled(self, client: Hashable) -> SuffixIndex:
        own = self.index()
        if self._recall is not None and client is not None:
            for doc in self._recall(client):
                own.add(list(doc))
        return own

    def session(self, client: Hashable = None) -> Layers:
        known = self._sessions.pop(client, None)
        if known is None:
            own = self._warm.pop(client, None) or self._recalled(client)
            known = Layers(own, self._past)
        self._sessions[client] = known
        while len(self._sessions) > self.config.clients + 1:
            self._sessions.pop(self._dropped(client, lambda s: 1))
        return self._sessions[client]

    def forget(self, history: Sequence[Sequence[int]] = ()) -> None:
        """The client None's session starts again from the persistent memory and `history`."""
        own = self.index()
        for doc in history:
            own.add(list(doc))
        self._sessions.pop(None, None)
        self._sessions[None] = Layers(own, self._past)

    def add(self, client: Hashable, doc: list[int]) -> None:
        session = self.session(client)
        if session.own.tokens > self.config.session_tokens:
            session = self._sessions[client] = Layers(self.index(), self._past)
        session.own.add(doc)
        self._bound(client)
        if self._on_done is not None:
            self._on_done(doc, client)

    def _bound(self, client: Hashable) -> None:
        held = sum(s.own.tokens for s in self._sessions.values())
        while held > self.config.clients_tokens and len(self._sessions) > 1:
            held -= self._sessions.pop(self._dropped(client, lambda s: s.own.tokens)).own.tokens

    def _dropped(self, client: Hashable, weight: Callable[[Layers], int]) -> Hashable:
        """The heaviest owner's least recently served session, other than `client`'s."""
        totals: dict[Hashable, int] = {}
        for other, layers in self._sessions.items():
            if other != client:
                totals[owner(other)] = totals.get(owner(other), 0) + weight(layers)
        heaviest = max(totals, key=lambda o: totals[o])
        return next(c for c in self._sessions if c != client and owner(c) == heaviest)
