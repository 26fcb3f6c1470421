"""The `auto` drafter: picks, every round, the drafter and K with the highest expected speed
under the measured cost model, and learns the acceptance rates from what gets accepted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edgespec.engine.cache import common_prefix
from edgespec.engine.drafters import ModelDrafter, NgramDrafter
from edgespec.engine.sampling import Sampler
from edgespec.engine.verify import EMPTY_DRAFT, Draft
from edgespec.planner.costs import CostModel

# Starting acceptance rates, per drafter. N-gram lookups are tracked apart for short and long
# matches: a long match that copies code is far more reliable than a 2-token one in prose.
# Few buckets, so that each learns from many rounds.
MAX_NGRAM = 8
LONG_MATCH = 4
PRIOR_ALPHA = {"ngram-short": 0.5, "ngram-long": 0.75, "model": 0.7}
EMA_WEIGHT = 0.1  # per drafted token
# Rejections cluster (the edit points of a copied file), so a long run of acceptances says
# less about the next token than a per-token rate suggests; K is chosen with at most this rate.
ALPHA_CAP = 0.98
PROBE_AFTER = 32  # rounds without speculation before a one-token probe
PROBE_MAX = 256  # the wait doubles after each failed probe, up to this
PROBE_MIN_MATCH = 3  # n-gram probes only on matches at least this long
PROBE_K = 1


@dataclass
class AdaptiveState:
    alpha: dict[str, float] = field(default_factory=lambda: dict(PRIOR_ALPHA))
    idle_rounds: int = 0
    probe_after: int = PROBE_AFTER
    switches: int = 0  # changes of drafter between speculating rounds
    probes: int = 0
    last_source: str = "none"


class AdaptiveDrafter:
    name = "auto"

    def __init__(
        self,
        costs: CostModel,
        ngram: NgramDrafter,
        model: ModelDrafter | None = None,
        *,
        k_max: int = 32,
    ) -> None:
        self.costs = costs
        self.ngram = ngram
        self.model = model
        self.k_max = k_max
        self.state = AdaptiveState()
        self._last: tuple[str, list[int], int, bool] | None = None  # key, draft, position, probe
        self._rate = 1.0  # expected speed of the current round, for the model's stop rule
        if model is not None:
            model.stop_rule = self._model_stop

    @property
    def uses_model(self) -> bool:
        return self.model is not None

    def forget(self) -> None:
        """Back to the prior acceptance rates (a new conversation; each bench run)."""
        self.state = AdaptiveState()

    def begin(self, tokens: Sequence[int]) -> None:
        self.ngram.begin(tokens)
        if self.model is not None:
            self.model.begin(tokens)
        self._last = None

    def _model_stop(self, drafted: int, cumulative: float) -> bool:
        # Draft one more token only if the tokens it is expected to add (the chance that it and
        # all before it are accepted) keep up with the speed this round is expected to reach.
        c = self.costs.c
        extra = c + self.costs.tau(drafted + 2) - self.costs.tau(drafted + 1)
        return cumulative < extra * self._rate / (self.costs.tau(1) + self.costs.overhead)

    def propose(self, tokens: Sequence[int], k: int, sampler: Sampler) -> Draft:
        k_cap = min(k, self.k_max)
        self._last = None
        if k_cap <= 0:
            return EMPTY_DRAFT
        options: list[tuple[float, int, str]] = []
        found = self.ngram.propose(tokens, k_cap, sampler)
        ngram_key = "ngram-long" if self.ngram.last_match >= LONG_MATCH else "ngram-short"
        if found.tokens:
            alpha = min(self.state.alpha[ngram_key], ALPHA_CAP)
            kn, sn = self.costs.best_k(alpha, len(found.tokens), c=0.0)
            options.append((sn, kn, ngram_key))
        if self.model is not None:
            km, sm = self.costs.best_k(min(self.state.alpha["model"], ALPHA_CAP), k_cap)
            options.append((sm, km, "model"))
        speed, best_k, key = max(options, default=(1.0, 0, "none"))
        probe = False
        if best_k == 0:
            self.state.idle_rounds += 1
            strong_match = self.ngram.last_match >= PROBE_MIN_MATCH
            if self.state.idle_rounds < self.state.probe_after or not (
                strong_match or self.model is not None
            ):
                return EMPTY_DRAFT
            # Speculation has been off for a while: try a one-token draft, so that a change in
            # the text (say, the answer starts copying code from the prompt) is noticed.
            probe = True
            self.state.probes += 1
            key = ngram_key if strong_match else "model"
            best_k, speed = min(PROBE_K, k_cap), 1.0
        self.state.idle_rounds = 0
        if key != self.state.last_source:
            self.state.switches += self.state.last_source != "none"
            self.state.last_source = key
        if key.startswith("ngram"):
            draft = Draft(found.tokens[:best_k], None, "ngram")
        else:
            assert self.model is not None
            self._rate = speed
            draft = self.model.propose(tokens, best_k, sampler)
        self._last = (key, list(draft.tokens), len(tokens), probe)
        return draft

    def commit(self, tokens: Sequence[int]) -> None:
        if self._last is not None:
            key, draft, position, probe = self._last
            accepted = common_prefix(draft, tokens[position : position + len(draft)])
            alpha = self.state.alpha[key]
            for _ in range(accepted):
                alpha += EMA_WEIGHT * (1.0 - alpha)
            if accepted < len(draft):
                alpha -= EMA_WEIGHT * alpha
            self.state.alpha[key] = alpha
            if probe:
                ok = accepted == len(draft)
                self.state.probe_after = (
                    PROBE_AFTER if ok else min(self.state.probe_after * 2, PROBE_MAX)
                )
            self._last = None
        if self.model is not None:
            self.model.commit(tokens)
