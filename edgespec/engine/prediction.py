"""Predicted outputs: the text an answer will mostly repeat (the file being edited), handed
over with the request (OpenAI's `prediction`), drafted as one more lookup source.

A prediction is read like a copy's source, with a place in it: while the answer follows the
prediction, each round drafts what comes next there. Where the answer leaves it (an edit
replaces a span), the place is found again by the answer's last tokens (the longest of its
n-grams, `max_n` down to `min_n`, that occurs in the prediction), at the first occurrence
past where the answer left it, so the lookup skips over what the answer replaced (else the
nearest before, for an answer that goes back). The policy prices its drafts like any lookup's:
by how long the answer has followed the prediction (`Lookup.match`), and a place found again
after an edit as a resumed copy. Verification is unchanged, so a prediction changes speed only.

Its tokens are counted apart in the stats (`by_drafter["prediction"]`): the two usage
counters of OpenAI's predicted outputs (`GenerationStats.accepted_prediction_tokens`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from edgespec.engine.drafters import PREDICTION, Drafter, DrafterKind, Lookup, Proposal
from edgespec.options import K_MAX


class PredictionDrafter:
    """Lookups into one generation's prediction (token ids). `max_n`/`min_n`: the longest and
    shortest n-gram of the answer that finds a place in the prediction again (as the suffix
    drafter's, config.py: shorter ones recur by chance); `resume_min`: a place found again,
    once the answer has followed it for this many tokens, is drafted as a resumed copy."""

    name = PREDICTION

    def __init__(
        self, prediction: Sequence[int], max_n: int = 8, min_n: int = 2, resume_min: int = 3
    ) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.prediction = tuple(prediction)
        self.max_n, self.min_n, self.resume_min = max_n, min_n, resume_min
        # n-gram -> the positions just after it, ascending (built once: a prediction is fixed)
        self._after: dict[tuple[int, ...], list[int]] = {}
        p = self.prediction
        for j in range(1, len(p)):
            for n in range(min_n, min(max_n, j) + 1):
                self._after.setdefault(p[j - n : j], []).append(j)
        self._start = 0  # where the answer begins in the context
        self._seen = 0  # context tokens read so far
        self._place: int | None = 0  # the prediction's next token for the answer (None: lost)
        self._left = 0  # where the answer last left the prediction
        self._run = 0  # tokens the answer has followed the prediction at this place
        self._resumed = False  # the place was found again after the answer left it

    def begin(self, tokens: Sequence[int]) -> None:
        """The answer starts after `tokens`, expected to start with the prediction."""
        self._start = self._seen = len(tokens)
        self._place, self._left, self._run, self._resumed = 0, 0, 0, False

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        place = self._place
        if room <= 0 or place is None or place >= len(self.prediction):
            return []
        found = self.prediction[place : place + min(room, K_MAX)]
        # Found again after an edit and followed for `resume_min` tokens: a resumed copy, until
        # it is followed as far as an n-gram holds (then a copy, as the suffix drafter's).
        resumed = self._resumed and self.resume_min <= self._run < self.max_n
        return [Lookup(found, self._run, self.name, resumed)]

    def commit(self, tokens: Sequence[int]) -> None:
        for j in range(max(self._seen, self._start), len(tokens)):
            self._follow(tokens, j)
        self._seen = len(tokens)

    def end(self) -> None:
        pass

    def _follow(self, tokens: Sequence[int], j: int) -> None:
        """The answer's token `tokens[j]`: on the prediction at its place, or a new place."""
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
        """Of the places just after an n-gram (ascending), the first whose n-gram starts where
        the answer left the prediction or later; else the last ending before there (an answer
        that goes back); None: none. One overlapping where the answer left is text it has
        passed, whose next token it just turned down."""
        i = bisect.bisect_left(after, self._left + n)
        if i < len(after):
            return after[i]
        before = bisect.bisect_left(after, self._left)
        return after[before - 1] if before else None


class WithPrediction:
    """A generation's drafter with a prediction's lookups on offer too. A fixed K takes the
    first proposal: the prediction's, where it offers one, else `other`'s. `auto`'s policy
    weighs them all and on a tie takes the first offered: its own drafter's (`own_first`).
    Where the prompt holds the predicted file `auto` copies it too, and its copies make the
    edits the instruction names and the answer has made, which the prediction's tokens do not:
    offered first, the prediction's drafts took more target passes than `auto` alone (24
    against 21 on a rename; benchmarks/predicted)."""

    def __init__(self, prediction: PredictionDrafter, other: Drafter) -> None:
        self.prediction = prediction
        self.other = other
        self.name = other.name

    @property
    def own_first(self) -> bool:
        """Whether `other`'s proposals come first: where a policy weighs them (`auto`)."""
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
