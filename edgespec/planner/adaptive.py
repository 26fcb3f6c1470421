"""The `auto` drafter: picks, every round, the drafter and K with the highest expected speed
under the measured cost model, and learns the acceptance rates from what gets accepted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edgespec.engine.drafters import ModelDrafter, NgramDrafter, common_prefix
from edgespec.engine.sampling import Sampler
from edgespec.engine.verify import EMPTY_DRAFT, Draft
from edgespec.planner.costs import CostModel

# Starting acceptance rates, per drafter; n-gram lookups are tracked by match length, since a
# 4-token match that copies code is far more reliable than a 2-token one in prose.
PRIOR_ALPHA = {"ngram2": 0.5, "ngram3": 0.7, "ngram4": 0.85, "model": 0.7}
EMA_WEIGHT = 0.1  # per drafted token
PROBE_AFTER = 8  # rounds without speculation before trying again
PROBE_MAX = 64
PROBE_K = 2


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
        ngram_key = f"ngram{min(self.ngram.last_match, 4)}"
        if found.tokens:
            alpha = self.state.alpha.setdefault(ngram_key, PRIOR_ALPHA["ngram2"])
            kn, sn = self.costs.best_k(alpha, len(found.tokens), c=0.0)
            options.append((sn, kn, ngram_key))
        if self.model is not None:
            km, sm = self.costs.best_k(self.state.alpha["model"], k_cap)
            options.append((sm, km, "model"))
        speed, best_k, key = max(options, default=(1.0, 0, "none"))
        probe = False
        if best_k == 0:
            self.state.idle_rounds += 1
            if self.state.idle_rounds < self.state.probe_after or not options:
                return EMPTY_DRAFT
            # Speculation has been off for a while: try a short draft, so that a change in the
            # text (say, the answer starts copying code from the prompt) is noticed.
            probe = True
            self.state.probes += 1
            key = ngram_key if found.tokens else "model"
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
