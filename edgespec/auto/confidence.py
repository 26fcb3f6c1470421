"""How far the draft model's own confidence can be trusted: a calibration learned from the
tokens the target judged.

The draft model's stop rule weighs one more token by the chance that it and every token before
it are accepted, read from the draft's probabilities. A small draft is often less sure of being
right than it should be (config.py: `ConfidenceConfig.gammas`). So the chance is taken as
confidence ** gamma, with gamma the value among a few that best explains (by likelihood) the
draft tokens the target judged: those accepted and the first one rejected. Until enough were
judged, gamma is 1: the draft's word. Values down to 0.2 are among them because a sampled draft
token is accepted with probability min(1, p/q), near 1 wherever the draft's distribution is
close to the target's however spread it is: at temperature > 0 the draft's top probability
undersells it far more than in greedy drafts."""

from __future__ import annotations

import math
from collections.abc import Sequence

from edgespec.auto.config import AUTO, ConfidenceConfig


class ConfidencePower:
    def __init__(self, config: ConfidenceConfig = AUTO.confidence) -> None:
        self.config = config
        self.gamma = 1.0
        self._loglik = [0.0] * len(config.gammas)
        self._judged = 0

    def judge(self, confidences: Sequence[float], accepted: int) -> None:
        """One draft's tokens, with the draft's confidence in each (in order), of which the
        first `accepted` were accepted; the one after them, if drafted, was rejected (the rest
        were never judged)."""
        gammas, horizon = self.config.gammas, self.config.horizon
        fade = 1.0 - 1.0 / horizon
        for i, p in enumerate(confidences[: accepted + 1]):
            p = min(max(p, 1e-6), 1.0 - 1e-6)
            hit = i < accepted
            keep = fade if self._judged >= horizon else 1.0
            self._loglik = [
                ll * keep + (g * math.log(p) if hit else math.log1p(-(p**g)))
                for ll, g in zip(self._loglik, gammas, strict=True)
            ]
            self._judged += 1
        if self._judged >= self.config.min_judged:
            # On a tie, the value nearest the draft's word.
            best = max(range(len(gammas)), key=lambda j: (self._loglik[j], -abs(gammas[j] - 1)))
            self.gamma = gammas[best]
