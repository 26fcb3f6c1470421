"""`auto`'s policy: every round, the proposal and shape with the highest expected speed at the
acceptance rates and costs learned so far (the engine's `DraftLength`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from edgespec.auto.budget import LookupBudget
from edgespec.auto.config import AUTO, AutoConfig
from edgespec.auto.costs import ALONE, LearnedCosts, Load
from edgespec.auto.learning import (
    AdaptiveState,
    AutoChoice,
    Bucket,
    ModelRounds,
    bucket,
    fresh_state,
)
from edgespec.auto.prior import CostModel, expected_tokens
from edgespec.auto.shapes import Shape, Shapes
from edgespec.engine.drafters import Choice, DraftKind, Lookup, ModelProposal, Proposal, StopRule
from edgespec.engine.events import RoundEvent
from edgespec.options import ALL_ON, K_MAX, AutoSwitches, DrafterKind


class RoundPrices:
    """`model_round_s` of every length at one load, priced once a round for the stop rule."""

    def __init__(self, costs: LearnedCosts, load: Load = ALONE) -> None:
        self._costs = costs
        self._load = load
        self._prices: list[float] = []

    def upto(self, n: int) -> list[float]:
        if len(self._prices) <= n:
            self._prices = self._costs.model_round_prices(n, self._load)
        return self._prices


# The others in a lane's passes: their tokens, their number, the fewest any has answered.
Sharing = Callable[[], tuple[int, int, int]]


class AdaptiveDraftLength:
    """One generation's policy. `costs`: the shared learned costs, or a calibration to learn
    them from given `step_s` (the target step in seconds; fixed without it). `state`: what the
    conversation taught. `load`: the other sequences in its passes (None: it has them alone),
    priced at the pass's total size; past `young_tokens` a lane yields to a younger (`_limit`)."""

    def __init__(
        self,
        costs: CostModel | LearnedCosts,
        *,
        k_max: int = K_MAX,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        tree_width: int = 1,
        switches: AutoSwitches = ALL_ON,
        config: AutoConfig = AUTO,
        state: AdaptiveState | None = None,
        load: Sharing | None = None,
    ) -> None:
        self.config = config.policy
        if isinstance(costs, LearnedCosts):
            self.costs = costs
        else:
            learn = step_s is not None
            self.costs = LearnedCosts(costs, step_s or 1.0, draft_tau, config.costs, learn=learn)
        self._k_max = k_max
        self._tree_width = tree_width
        self.state = state if state is not None else fresh_state(config)
        self.budget = LookupBudget(self.config, switches)
        self._load = load
        self._pass = ALONE
        self._yields = False  # this round, to a lane in its first tokens

    @property
    def k_max(self) -> int:
        return self._k_max

    @property
    def tree_width(self) -> int:
        return self._tree_width

    def stop_rule(self, k: int, rate: float, load: Load = ALONE) -> StopRule:
        """The draft model's stop rule: an extra token must earn `rate` tokens/s at `load`."""
        return partial(self._model_stop, k, rate, RoundPrices(self.costs, load))

    def _alpha(self, key: Bucket) -> float:
        return min(self.state.alpha[key], self.config.alpha_cap)

    def _model_stop(
        self, k: int, rate: float, prices: RoundPrices, drafted: int, chances: Sequence[float]
    ) -> bool:
        """Stop where no longer draft up to k adds tokens faster than `rate` (renewal-reward's
        optimal stopping); every length is weighed because verifying is not convex."""
        gamma = self.state.confidence.gamma
        alpha = self._alpha(Bucket.MODEL)
        last = max(k, drafted + 1)
        table = prices.upto(last)
        spent = table[drafted]
        gained = 0.0
        further = chances[-1] ** gamma
        for n in range(drafted + 1, last + 1):
            gained += further
            extra = table[n] - spent
            if extra <= 0.0 or gained / extra >= rate:
                return False
            further *= alpha
        return True

    def _shapes(self, load: Load) -> Shapes:
        return Shapes(self.costs, load, self.state, self.k_max, self.tree_width)

    def _best(self, shapes: Shapes, proposal: Proposal) -> tuple[float, Shape]:
        alpha = self._alpha(bucket(proposal, self.config))
        limit = self._limit(proposal)
        if isinstance(proposal, ModelProposal):
            if limit < self.k_max:
                shapes = replace(shapes, k_max=limit)
            return shapes.model(proposal.available, proposal.behind, alpha)
        k_max = self.budget.k_max(self.costs, shapes.load, self.k_max, self.state)
        return shapes.lookup(proposal, alpha, min(k_max, limit))

    def _limit(self, proposal: Proposal) -> int:
        """k_max, or while yielding the longest draft costing `yield_delay` more than a step."""
        if not self._yields:
            return self.k_max
        costs, load = self.costs, self._pass
        behind = proposal.behind if isinstance(proposal, ModelProposal) else 0
        allowed = (1.0 + self.config.yield_delay) * costs.plain_s(load)
        fits = (
            k
            for k in costs.prior.choices(self.k_max)
            if costs.round_s(proposal.kind, k, behind, load=load) <= allowed
        )
        return max(fits, default=0)

    def _sharing(self) -> tuple[Load, bool]:
        """The others in this round's pass, and whether this lane yields to one of them."""
        if self._load is None:
            return ALONE, False
        tokens, seqs, youngest = self._load()
        young = self.config.young_tokens
        return Load(tokens, seqs), seqs > 0 and youngest < young <= self.budget.generated

    def preview_lookup(self, lookup: Lookup, alpha: float) -> tuple[float, Shape]:
        """The speed and shape chosen for `lookup` at rate `alpha`, alone, changing nothing."""
        k_max = self.budget.k_max(self.costs, ALONE, self.k_max, self.state)
        return self._shapes(ALONE).lookup(lookup, min(alpha, self.config.alpha_cap), k_max)

    def preview_model(self, available: int, alpha: float) -> tuple[float, Shape]:
        return self._shapes(ALONE).model(available, 0, min(alpha, self.config.alpha_cap))

    def choose(self, proposals: Sequence[Proposal]) -> AutoChoice | None:
        self._pass, self._yields = self._sharing()
        shapes = self._shapes(self._pass)
        # The fastest proposal; on a tie, the more tokens, then the first offered (a lookup).
        chosen: Proposal | None = None
        speed, shape = 1.0, Shape(0)
        for proposal in proposals:
            option_speed, option_shape = self._best(shapes, proposal)
            if (option_speed, option_shape.k) > (speed, shape.k):
                chosen, speed, shape = proposal, option_speed, option_shape
        probe = chosen is None
        if chosen is None:
            chosen = None if self._yields else self._probe(proposals)
            if chosen is None:
                return self._shadow(proposals)
            shape = Shape(min(self.config.probe_k, self.k_max, chosen.available))
        self.state.idle_rounds = 0
        key = bucket(chosen, self.config)
        if key is not self.state.last_bucket:
            self.state.switches += self.state.last_bucket is not None
            self.state.last_bucket = key
        return self._choice(chosen, shape, speed, key, probe)

    def _choice(
        self, chosen: Proposal, shape: Shape, speed: float, key: Bucket, probe: bool
    ) -> AutoChoice:
        costs, load = self.costs, self._pass
        stop = None
        if isinstance(chosen, ModelProposal):
            if shape.width == 1:  # K only bounds a chain (a probe's too): the stop rule decides
                shape = Shape(min(self._limit(chosen), chosen.available))
            stop = self.stop_rule(shape.k, speed / costs.plain_s(load), load)
        fresh = isinstance(chosen, ModelProposal) and chosen.behind > costs.config.catch_up
        behind = chosen.behind if isinstance(chosen, ModelProposal) else 0
        extra = shape.nodes - shape.k if shape.width > 1 else 0
        if shape.k == 0 and shape.width == 1:
            predicted = costs.plain_s(load)
        else:
            predicted = costs.round_s(chosen.kind, shape.k, behind, extra, load)
        return AutoChoice(
            chosen,
            shape.k,
            shape.width,
            shape.nodes,
            stop,
            bucket=key,
            probe=probe,
            fresh=fresh,
            predicted_s=predicted,
        )

    def _shadow(self, proposals: Sequence[Proposal]) -> AutoChoice | None:
        for p in proposals:
            if isinstance(p, Lookup) and p.next is not None:
                plain = self.costs.plain_s(self._pass)
                return AutoChoice(
                    p, 0, bucket=bucket(p, self.config), shadow=True, predicted_s=plain
                )
        return None

    def _probe(self, proposals: Sequence[Proposal]) -> Proposal | None:
        """After a while without speculation, a one-token draft to notice a change in the text."""
        config, costs, load = self.config, self.costs, self._pass
        self.state.idle_rounds += 1
        strong: list[Proposal] = [
            p for p in proposals if isinstance(p, Lookup) and p.match >= config.probe_min_match
        ]
        waited = config.probe_budget * self.state.idle_rounds * costs.plain_s(load)
        model: list[Proposal] = [
            p
            for p in proposals
            if isinstance(p, ModelProposal)
            and costs.round_s(DraftKind.MODEL, config.probe_k, p.behind, load=load)
            - costs.plain_s(load)
            <= waited
        ]
        if self.state.idle_rounds < self.state.probe_after or not (strong or model):
            return None
        self.state.probes += 1
        return (strong or model)[0]

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        chosen = choice if isinstance(choice, AutoChoice) else None
        self._learn_costs(chosen, round_, seconds)
        self.state.confirmed = False
        if chosen is not None and chosen.shadow:
            self.state.learn_shadow(chosen, round_)
            chosen = None
        self.budget.count(self.costs, self._pass, round_, chosen)
        if chosen is None:
            return
        self.state.learn(chosen, round_)
        if chosen.proposal.kind is DraftKind.MODEL and round_.tree is None and not chosen.fresh:
            self._learn_model_round(round_.drafted, round_.accepted)

    def _learn_costs(self, chosen: AutoChoice | None, round_: RoundEvent, seconds: float) -> None:
        costs, load = self.costs, self._pass
        drafts = chosen is not None and not chosen.shadow and (chosen.k > 0 or chosen.width > 1)
        source: str
        if chosen is None or not drafts:
            kind, source, behind, predicted = None, DrafterKind.NONE, 0, costs.plain_s(load)
        else:
            proposal = chosen.proposal
            kind, source, predicted = proposal.kind, _source(proposal), chosen.predicted_s
            behind = proposal.behind if isinstance(proposal, ModelProposal) else 0
            if kind is DraftKind.MODEL and round_.tree is None:
                # The draft stopped itself: the prediction is of the round that ran.
                predicted = costs.model_round_s(round_.drafted, load) + costs.prefill_s(
                    kind, behind
                )
        costs.accuracy.add(source, predicted, seconds)
        if costs.learn:
            costs.observe(round_, kind if round_.drafted else None, seconds, behind, load)

    def _learn_model_round(self, drafted: int, accepted: int) -> None:
        costs, load, config = self.costs, self._pass, self.config
        seconds = costs.model_round_s(drafted, load)
        if self.state.model_rounds is None:  # the prior: a chain at the prior rate
            alpha = min(config.prior_model, config.alpha_cap)
            k = max(costs.best_k(DraftKind.MODEL, alpha, self.k_max, load=load)[0], 1)
            prior = ModelRounds(expected_tokens(alpha, k), costs.model_round_s(k, load))
            self.state.model_rounds = prior
        self.state.model_rounds.add(accepted + 1, seconds, config.model_round_weight)


def _source(proposal: Proposal) -> str:
    return proposal.source if isinstance(proposal, Lookup) else proposal.drafter.name
