"""The edits a copy makes again: what the output put in place of its source's tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.auto.config import AUTO, SuffixConfig


@dataclass(frozen=True)
class Trail:
    """The last copy: its source, its offset from the context, the context's length then, and
    where the stretch the context copied from the source at that offset began."""

    doc: Sequence[int]
    offset: int
    length: int
    since: int


def _copied_until(context: Sequence[int], doc: Sequence[int], offset: int, j: int) -> int:
    """The first position from j on where the context no longer equals `doc` read at
    `offset` (len(context) where it still does, or where the source ends)."""
    while j < len(context) and 0 <= j + offset < len(doc) and context[j] == doc[j + offset]:
        j += 1
    return j


def reach(context: Sequence[int], doc: Sequence[int], at: int, most: int) -> int:
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
            m = reach(context, doc, q, config.copy_min - 1)
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
