"""Predicted outputs (OpenAI's `prediction`: the file being edited), drafted as one more lookup:
what follows the answer's place in it. Where the answer leaves it (an edit), the place is found
again by its longest last n-gram, past where it left, so the lookup skips what was replaced.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from edgespec.engine.drafters import PREDICTION, Drafter, DrafterKind, Lookup, Proposal
from edgespec.options import K_MAX


class PredictionDrafter:
    """Lookups into a prediction; `resume_min`: a place found again and followed this long is
    drafted as a resumed copy."""

    name = PREDICTION

    def __init__(
        self, prediction: Sequence[int], max_n: int = 8, min_n: int = 2, resume_min: int = 3
    ) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.prediction = tuple(prediction)
        self.max_n, self.min_n, self.resume_min = max_n, min_n, resume_min
        self._after: dict[tuple[int, ...], list[int]] = {}
        p = self.prediction
        for j in range(1, len(p)):
            for n in range(min_n, min(max_n, j) + 1):
                self._after.setdefault(p[j - n : j], []).append(j)
        self._start = 0
        self._seen = 0
        self._place: int | None = 0  # the prediction's next token for the answer (None: lost)
        self._left = 0  # where the answer last left the prediction
        self._run = 0
        self._resumed = False

    def begin(self, tokens: Sequence[int]) -> None:
        self._start = self._seen = len(tokens)
        self._place, self._left, self._run, self._resumed = 0, 0, 0, False

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        place = self._place
        if room <= 0 or place is None or place >= len(self.prediction):
            return []
        found = self.prediction[place : place + min(room, K_MAX)]
        # A resumed copy until followed as far as an n-gram holds (then a copy).
        resumed = self._resumed and self.resume_min <= self._run < self.max_n
        return [Lookup(found, self._run, self.name, resumed)]

    def commit(self, tokens: Sequence[int]) -> None:
        for j in range(max(self._seen, self._start), len(tokens)):
            self._follow(tokens, j)
        self._seen = len(tokens)

    def end(self) -> None:
        pass

    def _follow(self, tokens: Sequence[int], j: int) -> None:
        place, p = self._place, self.prediction
        if place is not None and place < len(p) and p[place] == tokens[j]:
            self._place, self._run = place + 1, self._run + 1
            return
        if place is not None:
            self._left = place
        self._place, self._run, self._resumed = None, 0, False
        answer = tokens[max(self._start, j + 1 - self.max_n) : j + 1]
        for n in range(min(self.max_n, len(answer)), self.min_n - 1, -1):
            place = self._found(self._after.get(tuple(answer[len(answer) - n :]), []), n)
            if place is not None:
                self._place, self._run, self._resumed = place, n, True
                return

    def _found(self, after: list[int], n: int) -> int | None:
        """The first place whose n-gram starts where the answer left or later (one overlapping
        it is text whose next token the answer turned down); else the last before."""
        i = bisect.bisect_left(after, self._left + n)
        if i < len(after):
            return after[i]
        before = bisect.bisect_left(after, self._left)
        return after[before - 1] if before else None


class WithPrediction:
    """A drafter with a prediction's lookups first for a fixed K; after `auto`'s own, which win
    a tie: its copies make the edits asked for, the prediction does not (docs/tuning.md,
    Predicted outputs)."""

    def __init__(self, prediction: PredictionDrafter, other: Drafter) -> None:
        self.prediction = prediction
        self.other = other
        self.name = other.name

    @property
    def own_first(self) -> bool:
        return self.other.name == DrafterKind.AUTO

    def begin(self, tokens: Sequence[int]) -> None:
        self.prediction.begin(tokens)
        self.other.begin(tokens)

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        own, predicted = self.other.offer(tokens, room), self.prediction.offer(tokens, room)
        return own + predicted if self.own_first else predicted + own

    def commit(self, tokens: Sequence[int]) -> None:
        self.prediction.commit(tokens)
        self.other.commit(tokens)

    def end(self) -> None:
        self.prediction.end()
        self.other.end()
