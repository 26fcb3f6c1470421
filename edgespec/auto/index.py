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


class SuffixMemory:
    """The persistent memory and a session per client: clients never draft from each other's
    texts, since the speed and counts would tell one about another's."""

    def __init__(
        self,
        config: SuffixConfig = AUTO.suffix,
        past: Sequence[Sequence[int]] = (),
        on_done: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.config = config
        self._past = self.index()
        for doc in past:
            self._past.add(list(doc))
        self._sessions: OrderedDict[Hashable, Layers] = OrderedDict()
        self._on_done = on_done

    def index(self) -> SuffixIndex:
        return SuffixIndex(self.config.max_n, self.config.copy_sources)

    def session(self, client: Hashable = None) -> Layers:
        known = self._sessions.pop(client, None)
        self._sessions[client] = known if known is not None else Layers(self.index(), self._past)
        while len(self._sessions) > self.config.clients + 1:
            self._sessions.popitem(last=False)
        return self._sessions[client]

    def forget(self, client: Hashable = None, history: Sequence[Sequence[int]] = ()) -> None:
        own = self.index()
        for doc in history:
            own.add(list(doc))
        self._sessions.pop(client, None)
        self._sessions[client] = Layers(own, self._past)

    def add(self, client: Hashable, doc: list[int]) -> None:
        session = self.session(client)
        if session.own.tokens > self.config.session_tokens:
            session = self._sessions[client] = Layers(self.index(), self._past)
        session.own.add(doc)
        self._bound(client)
        if self._on_done is not None:
            self._on_done(doc)

    def _bound(self, client: Hashable) -> None:
        """Drop the least recently served other sessions while all hold more than the cap."""
        held = sum(s.own.tokens for s in self._sessions.values())
        for other in list(self._sessions):
            if held <= self.config.clients_tokens:
                break
            if other != client:
                held -= self._sessions.pop(other).own.tokens
