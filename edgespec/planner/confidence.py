"""How far the draft model's own confidence can be trusted: a calibration learned from the
tokens the target judged.

The draft model's stop rule weighs one more token by the chance that it and every token before
it are accepted, read from the draft's probabilities. A small draft is often less sure of being
right than it should be: on the built-in suites' greedy outputs the 0.5B draft's first choice
was the 1.5B target's token 45 % of the time where its probability was 0.3-0.5, 71 % at
0.5-0.7 and 93 % at 0.8-0.9. So the chance is taken as confidence ** gamma, with gamma the
value among a few that best explains (by likelihood) the draft tokens the target judged: those
accepted and the first one rejected. Until enough were judged, gamma is 1: the draft's word."""

from __future__ import annotations

import math
from collections.abc import Sequence

# Down to 0.2: a sampled draft token is accepted with probability min(1, p/q), near 1 wherever
# the draft's distribution is close to the target's however spread it is, so at temperature
# > 0 the draft's top probability undersells it far more than in greedy drafts.
GAMMAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2)
MIN_JUDGED = 32  # tokens judged before the draft's word is doubted
HORIZON = 512  # tokens: older judgements fade, so that a change of text is followed


class ConfidencePower:
    def __init__(self) -> None:
        self.gamma = 1.0
        self._loglik = [0.0] * len(GAMMAS)
        self._judged = 0

    def judge(self, confidences: Sequence[float], accepted: int) -> None:
        """One draft's tokens, with the draft's confidence in each (in order), of which the
        first `accepted` were accepted; the one after them, if drafted, was rejected (the rest
        were never judged)."""
        fade = 1.0 - 1.0 / HORIZON
        for i, p in enumerate(confidences[: accepted + 1]):
            p = min(max(p, 1e-6), 1.0 - 1e-6)
            hit = i < accepted
            keep = fade if self._judged >= HORIZON else 1.0
            self._loglik = [
                ll * keep + (g * math.log(p) if hit else math.log1p(-(p**g)))
                for ll, g in zip(self._loglik, GAMMAS, strict=True)
            ]
            self._judged += 1
        if self._judged >= MIN_JUDGED:
            # On a tie, the value nearest the draft's word.
            best = max(range(len(GAMMAS)), key=lambda j: (self._loglik[j], -abs(GAMMAS[j] - 1)))
            self.gamma = GAMMAS[best]
