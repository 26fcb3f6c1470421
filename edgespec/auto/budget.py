"""How long a lookup may be: a long match in prose is often chance and wastes a whole
verification, so long lookups wait for proof of copying and risk what earlier lookups gained."""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.auto.config import PolicyConfig
from edgespec.auto.costs import LearnedCosts, Load
from edgespec.auto.learning import AdaptiveState, AutoChoice
from edgespec.engine.drafters import DraftKind
from edgespec.engine.events import RoundEvent
from edgespec.options import AutoSwitches


@dataclass
class LookupBudget:
    """One answer's lookups: target steps saved over plain decoding, and tokens written."""

    config: PolicyConfig
    switches: AutoSwitches
    gained: float = 0.0
    generated: int = 0

    def k_max(self, costs: LearnedCosts, load: Load, k_max: int, state: AdaptiveState) -> int:
        ramp = self._ramp(costs, load, k_max, state)
        return self._budget(costs, load, ramp) if self.switches.budget else ramp

    def _budget(self, costs: LearnedCosts, load: Load, k_max: int) -> int:
        """The longest draft whose loss, were its first token wrong, fits the budget (at least
        `lookup_risk`, so that one early miss cannot hold lookups off for good)."""
        config = self.config
        gained = self.gained * (config.risk_gear if self.gained > 0 else 1.0)
        allowed = config.risk_base + gained + config.risk_share * self.generated
        allowed = max(allowed, config.lookup_risk)
        ks = costs.prior.choices(k_max)
        fits = (k for k in ks if costs.steps(DraftKind.LOOKUP, k, load) - 1.0 <= allowed)
        return max(fits, default=0)

    def _ramp(self, costs: LearnedCosts, load: Load, k_max: int, state: AdaptiveState) -> int:
        """Until copying is proven, a lookup may cost `lookup_risk` steps more than a plain one,
        or be `copy_growth` times the longest copy accepted in full."""
        config = self.config
        proof = config.copy_proof if self.switches.proof else 1
        if not self.switches.ramp or state.proven >= proof or state.confirmed:
            return k_max
        allowed = (1.0 + config.lookup_risk) * costs.plain_s(load)
        ks = costs.prior.choices(k_max)
        risky = max(
            (k for k in ks if costs.round_s(DraftKind.LOOKUP, k, load=load) <= allowed), default=0
        )
        grown = max((k for k in ks if k <= config.copy_growth * state.proven), default=0)
        return max(risky, grown)

    def count(
        self, costs: LearnedCosts, load: Load, round_: RoundEvent, chosen: AutoChoice | None
    ) -> None:
        self.generated += round_.forced + round_.accepted + 1
        if chosen is None or chosen.proposal.kind is not DraftKind.LOOKUP or not round_.drafted:
            return
        steps = costs.steps(DraftKind.LOOKUP, round_.drafted, load)  # a tree: all its nodes
        self.gained += round_.accepted + 1 - steps
