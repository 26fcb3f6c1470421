"""The edits a copy makes again: a function renamed at its first occurrence is renamed in the
draft at the next, where an unchanged copy breaks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.auto.config import AUTO, SuffixConfig


@dataclass(frozen=True)
class Trail:
    """The last copy: source, offset, the context's length then, where its stretch began."""

    doc: Sequence[int]
    offset: int
    length: int
    since: int


def _copied_until(context: Sequence[int], doc: Sequence[int], offset: int, j: int) -> int:
    while j < len(context) and 0 <= j + offset < len(doc) and context[j] == doc[j + offset]:
        j += 1
    return j


def matched_before(context: Sequence[int], doc: Sequence[int], at: int, most: int) -> int:
    n = 0
    while n < min(most, at, len(context)) and doc[at - 1 - n] == context[-1 - n]:
        n += 1
    return n


class Edits:
    """Edits learned where a copy takes up its source again after leaving it (the tokens
    between, on both sides), forgotten where the output copied the source unchanged after all."""

    def __init__(self, config: SuffixConfig = AUTO.suffix, learn: bool = True) -> None:
        self.config = config
        self.learn = learn
        # first token -> the source's tokens -> what replaced them
        self.by_first: dict[int, dict[tuple[int, ...], list[int]]] = {}
        self._trail: Trail | None = None

    def expect(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Edits known beforehand (hints.py): (the source's tokens, what replaces them)."""
        for old, new in pairs:
            if old and tuple(old) != tuple(new):
                self.by_first.setdefault(old[0], {})[tuple(old)] = list(new)

    def track(self, context: Sequence[int], doc: Sequence[int], at: int, reach: int) -> None:
        """A copy from `doc[at]`: learn what the context changed since the last from it."""
        n, config = len(context), self.config
        trail, self._trail = self._trail, Trail(doc, at - n, n, n - reach)
        if trail is None or trail.doc is not doc:
            return
        offset, since = trail.offset, trail.since
        j = _copied_until(context, doc, offset, trail.length)
        self._forget_kept(context, since, trail.length, j)
        if j == n and at - n == offset:
            self._trail = Trail(doc, offset, n, since)
        resumed = n - reach
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
        """(source, position, match) where the context, having left the last copy's source,
        matches it again within `resume_window` past where it left (None: nowhere)."""
        if self._trail is None:
            return None
        doc, offset, config = self._trail.doc, self._trail.offset, self.config
        n = len(context)
        j = _copied_until(context, doc, offset, self._trail.length)
        if j == n or not 0 <= j + offset < len(doc):
            return None
        left = j + offset
        best, at = config.resume_min - 1, -1
        for q in range(left, min(left + config.resume_window, len(doc) - 1) + 1):
            m = matched_before(context, doc, q, config.copy_min - 1)
            if m > best:
                best, at = m, q
        return (doc, at, best) if at >= 0 else None

    def _forget_kept(self, context: Sequence[int], since: int, start: int, end: int) -> None:
        """Forget the edits the context did not make where it copied their tokens."""
        for i in range(max(since, start - self.config.edit_max + 1), end):
            known = self.by_first.get(context[i], {})
            for old in [e for e in known if start < i + len(e) <= end]:
                if tuple(context[i : i + len(old)]) == old:
                    del known[old]

    def apply(self, copy: Sequence[int], k: int) -> list[int]:
        """`copy` with the edits made, up to k tokens, ending before an edit it holds in part."""
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
