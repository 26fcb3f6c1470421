"""A token's chance of acceptance: the draft's confidence ** gamma, gamma among `gammas` the
likeliest given the tokens judged (1 until `min_judged`)."""

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
        """A draft's confidences: the first `accepted` accepted, the next (if any) rejected."""
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
