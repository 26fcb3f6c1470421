"""The per-round policy behind `auto`: every round, the proposal (a lookup or the draft model)
and the K, or tree, with the highest expected speed, with the acceptance rates and the costs of
each part of a round learned from the rounds that ran (`costs.py`; the calibration is the
prior). The engine calls it through its `DraftLength` hook: `choose` returns an `AutoChoice`,
which carries what its round teaches, and `observe` is handed it back with the round's event
and measured time. It reads no clock and keeps nothing between a round's choice and its
outcome; one is started per generation (`start.py`), with what it learned before passed in.
Its constants are `PolicyConfig`'s (config.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial

from edgespec.auto.confidence import ConfidencePower
from edgespec.auto.config import AUTO, AutoConfig, PolicyConfig
from edgespec.auto.costs import ALONE, LearnedCosts, Load
from edgespec.auto.prior import CostModel, expected_tokens
from edgespec.engine.drafters import (
    Choice,
    DraftKind,
    Lookup,
    ModelProposal,
    Proposal,
    StopRule,
)
from edgespec.engine.events import RoundEvent
from edgespec.options import ALL_ON, K_MAX, AutoSwitches, DrafterKind


class Bucket(Enum):
    """Which learned acceptance rate a draft counts for. Lookups are learned apart by how long
    their match is: a long match that copies code is far more reliable than a 2-token one in
    prose, and one as long as the suffix index holds means text is being copied. Few buckets,
    so that each learns from many rounds."""

    SHORT = "short"  # a lookup's match shorter than `long_match`
    LONG = "long"
    COPY = "copy"  # a match of at least `copy_match`
    RESUMED = "resumed"  # a copy that takes up again the source it left (an edit)
    MODEL = "model"


COPIES = (Bucket.COPY, Bucket.RESUMED)  # the buckets of lookups that copy a source


def priors(config: PolicyConfig) -> dict[Bucket, float]:
    """The starting acceptance rates. A rate that starts too low never learns better where only
    a high rate pays (nothing is drafted), so the copy prior is high and its misses bring it
    down."""
    return {
        Bucket.SHORT: config.prior_short,
        Bucket.LONG: config.prior_long,
        Bucket.COPY: config.prior_copy,
        Bucket.RESUMED: config.prior_resume,
        Bucket.MODEL: config.prior_model,
    }


def bucket(proposal: Proposal, config: PolicyConfig = AUTO.policy) -> Bucket:
    """Which learned acceptance rate applies to a draft from this proposal."""
    if isinstance(proposal, ModelProposal):
        return Bucket.MODEL
    if proposal.resumed:
        return Bucket.RESUMED
    if proposal.match >= config.copy_match:
        return Bucket.COPY
    return Bucket.LONG if proposal.match >= config.long_match else Bucket.SHORT


@dataclass
class ModelRounds:
    """Moving averages over the draft model's rounds as its stop rule drafted them: tokens a
    round gave (accepted + the target's) and the seconds such a round costs."""

    tokens: float
    seconds: float


@dataclass
class AdaptiveState:
    """What the policy learned about the text (forgotten with it)."""

    config: PolicyConfig = AUTO.policy
    alpha: dict[Bucket, float] = field(init=False)
    idle_rounds: int = 0
    probe_after: int = field(init=False)
    switches: int = 0  # changes of drafter between speculating rounds
    probes: int = 0
    last_bucket: Bucket | None = None
    # Per kind of tree: how often the target took a branch where the main chain missed.
    fork_hit: dict[DraftKind, float] = field(init=False)
    confidence: ConfidencePower = field(default_factory=ConfidencePower)  # the draft model's
    model_rounds: ModelRounds | None = None  # what the draft model's rounds gave (None: none yet)
    proven: int = 0  # the longest copy accepted in full (copy_proof of them: text is copied)
    confirmed: bool = False  # the last round's undrafted copy had its first token right

    def __post_init__(self) -> None:
        self.alpha = priors(self.config)
        self.probe_after = self.config.probe_after
        self.fork_hit = {
            DraftKind.LOOKUP: self.config.fork_prior_lookup,
            DraftKind.MODEL: self.config.fork_prior_model,
        }


class RoundPrices:
    """What a round of the draft model that drafts n tokens costs (`model_round_s`), priced
    once per round, when first asked: the stop rule weighs the lengths after the tokens drafted
    at every draft step, and priced again each time they were most of `auto`'s bookkeeping
    (11,000 prices per 640 tokens)."""

    def __init__(self, costs: LearnedCosts) -> None:
        self._costs = costs
        self._prices: list[float] = []

    def upto(self, n: int) -> list[float]:
        """The prices of 0 to n tokens (at least), indexed by the tokens drafted."""
        if len(self._prices) <= n:
            # A round's stop rule weighs every length up to its K before it stops: all of
            # them at once cost less than one at a time.
            self._prices = self._costs.model_round_prices(n)
        return self._prices


@dataclass(frozen=True)
class Shape:
    """How a proposal is drafted: K tokens in its main chain, and as a tree `width` leaves and
    `nodes` tokens in all (width 1: a chain)."""

    k: int
    width: int = 1
    nodes: int = 0


@dataclass
class Answer:
    """This answer's: target steps its lookup rounds saved over plain decoding (< 0: lost), and
    tokens written (`_lookup_budget`); each answer starts afresh."""

    gained: float = 0.0
    generated: int = 0


@dataclass(frozen=True, kw_only=True)
class AutoChoice(Choice):
    """A round's choice with what the policy learns from it when the engine hands it back.

    `shadow`: a plain step (K 0) that checks the first token the lookup would have drafted
    (`proposal.next`) against the target's, for free."""

    bucket: Bucket
    probe: bool = False
    fresh: bool = False  # the draft model's first draft after reading new context
    shadow: bool = False
    predicted_s: float  # what the round is expected to take, in seconds


def fresh_state(config: AutoConfig = AUTO) -> AdaptiveState:
    """The prior acceptance rates: what a new conversation starts from."""
    return AdaptiveState(config.policy, confidence=ConfidencePower(config.confidence))


def _moved(rate: float, trial: float, weight: float) -> float:
    """A learned rate after one more trial (1.0: success, 0.0: failure): a moving average."""
    return rate + weight * (trial - rate)


class AdaptiveDraftLength:
    """Chooses the proposal and its shape per round, for one generation; `k_max` caps K (the
    user's -k with `auto`).

    `costs`: the learned costs (shared across generations: they belong to the device), or a
    calibration to start them from, learned from every round with `step_s` (the calibrated
    target step, in seconds) and fixed without it (the unit tests' cost models). `state`: what
    earlier generations of the conversation taught (a fresh one without it). What a generation
    may choose (`k_max`, `tree_width`, the switches) is fixed when it is built."""

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
        load: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        self.config = config.policy
        if isinstance(costs, LearnedCosts):
            self.costs = costs
        else:
            learn = step_s is not None
            self.costs = LearnedCosts(costs, step_s or 1.0, draft_tau, config.costs, learn=learn)
        self._k_max = k_max
        self._tree_width = tree_width  # the most leaves of a tree draft (1: chains only)
        self._switches = switches
        self.state = state if state is not None else fresh_state(config)
        self.answer = Answer()
        # The tokens of other sequences that share this generation's passes, and how many
        # sequences they are (None: none do).
        self._load = load
        self._pass = ALONE  # the load of the round in hand: set by `choose`, read by `observe`

    @property
    def k_max(self) -> int:
        return self._k_max

    @property
    def tree_width(self) -> int:
        return self._tree_width

    def stop_rule(self, k: int, rate: float) -> StopRule:
        """The draft model's stop rule for a round of up to k tokens (`_model_stop`); `rate`
        (tokens per second) is what an extra token's time must earn. The costs do not change
        within a round, so each length's is priced once per round (`RoundPrices`), not at every
        draft step again."""
        return partial(self._model_stop, k, rate, RoundPrices(self.costs))

    def _alpha(self, key: Bucket) -> float:
        """The learned acceptance rate of a bucket, capped: no rate is trusted as certain."""
        return min(self.state.alpha[key], self.config.alpha_cap)

    def _model_stop(
        self, k: int, rate: float, prices: RoundPrices, drafted: int, chances: Sequence[float]
    ) -> bool:
        """The draft model's stop rule for a round of up to k tokens: draft on while the tokens
        that drafting further is expected to add, per second it adds, beat `rate`, the speed
        the rounds are expected to reach (so a round ends where its next tokens would earn less
        than the time they take is worth elsewhere: renewal-reward's optimal stopping). Every
        length up to k is looked at, not only the next token's, because verification is not
        convex (where verifying 2 tokens costs far more than 1 and 8 little more than 2, the
        next token alone never pays). `chances` (the draft's own, up to and with the next
        token) are calibrated against what the target accepted; tokens beyond the next are
        expected at the learned rate."""
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

    def _learn_model_round(self, drafted: int, accepted: int) -> None:
        """One more round of the draft model's (its catch-up included), as its stop rule
        drafted it, priced at what such a round costs (the learned costs: no timing noise)."""
        weight = self.config.model_round_weight
        seconds = self.costs.model_round_s(drafted, self._pass)
        learned = self.state.model_rounds
        if learned is None:  # the prior: a chain at the prior acceptance rate
            alpha = min(self.config.prior_model, self.config.alpha_cap)
            k, _ = self.costs.best_k(DraftKind.MODEL, alpha, self.k_max, load=self._pass)
            k = max(k, 1)
            learned = ModelRounds(
                expected_tokens(alpha, k), self.costs.model_round_s(k, self._pass)
            )
            self.state.model_rounds = learned
        learned.tokens += weight * (accepted + 1 - learned.tokens)
        learned.seconds += weight * (seconds - learned.seconds)

    def _best(self, proposal: Proposal) -> tuple[float, Shape]:
        """The fastest way to draft this proposal: its speed, and its shape (a chain of K, or
        a tree when that is faster)."""
        alpha = self._alpha(bucket(proposal, self.config))
        if isinstance(proposal, ModelProposal):
            return self._best_model(proposal.available, proposal.behind, alpha)
        return self._best_lookup(proposal, alpha)

    def preview_lookup(self, lookup: Lookup, alpha: float) -> tuple[float, Shape]:
        """What this policy would choose for `lookup` were lookups accepted at `alpha` (capped
        as every learned rate is), without choosing it or learning: its speed and shape (the
        plan shows it before anything is loaded)."""
        return self._best_lookup(lookup, min(alpha, self.config.alpha_cap))

    def preview_model(self, available: int, alpha: float) -> tuple[float, Shape]:
        """What this policy would choose for the draft model, with `available` tokens to draft
        and its context read, were it accepted at `alpha` (capped), without choosing it."""
        return self._best_model(available, 0, min(alpha, self.config.alpha_cap))

    def _lookup_k_max(self) -> int:
        """The longest lookup draft allowed now (0: none): the ramp's, within the budget."""
        k_max = self._lookup_ramp()
        return self._lookup_budget(k_max) if self._switches.budget else k_max

    def _lookup_budget(self, k_max: int) -> int:
        """The longest lookup draft, up to `k_max`, whose loss were its first token wrong (a
        round's cost beyond a plain step's) is within what the answer's rounds gained: a copy
        that runs in one answer long after another has paid for it stays long, while one
        phrase echoed by chance cannot lose a 16-token verification twice."""
        config, answer, costs = self.config, self.answer, self.costs
        gained = answer.gained * (config.risk_gear if answer.gained > 0 else 1.0)
        allowed = config.risk_base + gained + config.risk_share * answer.generated
        # Never below the ramp's one step: an answer whose long copies missed still drafts the
        # short ones that can win its budget back (without this floor one early miss held
        # lookups off for hundreds of tokens).
        allowed = max(allowed, config.lookup_risk)
        ks = costs.prior.choices(k_max)
        fits = (k for k in ks if costs.steps(DraftKind.LOOKUP, k, self._pass) - 1.0 <= allowed)
        return max(fits, default=0)

    def _lookup_ramp(self) -> int:
        """The longest lookup draft allowed now (0: none). A copy's prior is high so that
        copies are tried where verifying is steep; but in prose a long match is often chance,
        and a miss at its first token wastes the whole verification (a 16-token one cost a
        short answer 10 %). So until the text is known to be copied (a copy of `copy_proof`
        tokens accepted in full), a lookup round may cost at most `lookup_risk` target steps
        more than a plain one (short drafts or none where verifying is steep, any where it is
        nearly flat), or be `copy_growth` times the longest copy accepted in full. A copy held
        back is checked for free instead, its first token against the target's
        (`AutoChoice.shadow`); one that was right is drafted in full the next round."""
        proof = self.config.copy_proof if self._switches.proof else 1
        if not self._switches.ramp or self.state.proven >= proof or self.state.confirmed:
            return self.k_max
        costs = self.costs
        allowed = (1.0 + self.config.lookup_risk) * costs.plain_s(self._pass)
        ks = costs.prior.choices(self.k_max)
        risky = max(
            (k for k in ks if costs.round_s(DraftKind.LOOKUP, k, load=self._pass) <= allowed),
            default=0,
        )
        # Until then, each copy accepted in full earns a draft `copy_growth` times its length:
        # in prose two one-token copies were taken for copying, and the 16-token draft after
        # them missed.
        grown = max((k for k in ks if k <= self.config.copy_growth * self.state.proven), default=0)
        return max(risky, grown)

    def _best_lookup(self, lookup: Lookup, alpha: float) -> tuple[float, Shape]:
        k_max = self._lookup_k_max()
        limit = min(k_max, lookup.available)
        speed, k = 1.0, 0
        if limit > 0:
            k, speed = self.costs.best_k(
                DraftKind.LOOKUP, alpha, limit, 0, lookup.available, self._pass
            )
        if lookup.forks and self.tree_width > 1:
            tree_speed, tree = self._best_tree(lookup, k, k_max, alpha, speed)
            if tree_speed > speed + 1e-12:
                return tree_speed, tree
        return speed, Shape(k)

    def _best_model(self, available: int, behind: int, alpha: float) -> tuple[float, Shape]:
        limit = min(self.k_max, available)
        speed, k = 1.0, 0
        if limit > 0:
            k, speed = self.costs.best_k(
                DraftKind.MODEL, alpha, limit, behind, available, self._pass
            )
        learned = self.state.model_rounds
        if limit > 0 and learned is not None:
            # The rounds that ran say more than the acceptance rate does: the stop rule drafts
            # the tokens the draft is sure of and stops at those it is not, so a rate pulled
            # down by unsure tokens under-prices the rounds (on prose it priced the model below
            # plain decoding for good, while its sure runs went on being accepted).
            spread = learned.tokens / max(1, min(available, self.costs.config.amortize_tokens))
            prefill = self.costs.prefill_s(DraftKind.MODEL, behind) * min(1.0, spread)
            speed = self.costs.relative_speed(learned.tokens, learned.seconds + prefill, self._pass)
            # A chain's length is its stop rule's (`_choose`); a tree keeps the best K's chain.
            k = max(k, 1) if speed > 1.0 else 0
        if k > 0 and self.tree_width > 1:
            leaves, leaf_speed = self._best_leaves(behind, k, alpha)
            if leaf_speed > speed + 1e-12:
                return leaf_speed, Shape(k, leaves + 1, k + leaves)
        return speed, Shape(k)

    def _best_leaves(self, behind: int, k: int, alpha: float) -> tuple[int, float]:
        """How many of the draft model's second choices to verify as one-token leaves beside
        its chain of k, and the speed that gives (0 leaves: none pays).

        A leaf adds a token where the chain misses and the target takes it; the drafter puts
        the leaves where a miss is likeliest, but here they are counted at the chain's first
        positions (a chain accepted at alpha per token misses there most often): an estimate
        that leans low. Only tree sizes whose verification was measured are costed."""
        hit = self.state.fork_hit[DraftKind.MODEL]
        chain = expected_tokens(alpha, k)
        best = (0, 0.0)
        for leaves in range(1, min(self.tree_width - 1, k) + 1):
            if k + 1 + leaves not in self.costs.prior.tau_points:
                continue  # only sizes whose verification was measured
            gain = hit * sum(alpha**d * (1.0 - alpha) for d in range(leaves))
            cost = self.costs.round_s(DraftKind.MODEL, k, behind, leaves, self._pass)
            speed = self.costs.relative_speed(chain + gain, cost, self._pass)
            if speed > best[1]:
                best = (leaves, speed)
        return best

    def _best_tree(
        self, lookup: Lookup, k: int, k_max: int, alpha: float, chain_speed: float
    ) -> tuple[float, Shape]:
        """The best tree: a main chain (the best chain's K, half of it, or just past the
        forks, at most `k_max`) plus branches at its first forks, among node counts whose
        verification was measured. Its speed and shape (speed 0: none beats the chain).

        It runs every round, so the work is bounded: a tree whose most optimistic gain cannot
        beat the chain is never costed, which is every tree where verification is steep."""
        offered = lookup.forks[: self.tree_width - 1]
        best = (0.0, Shape(k, 1, k))
        branch_max = self.config.branch_max
        sizes = self.costs.prior.choices(k_max)
        # Rounds of each size relative to a plain step, and the cheapest from each size on.
        cost = {n: self.costs.steps(DraftKind.LOOKUP, n, self._pass) for n in sizes}
        later = list(itertools.accumulate((cost[n] for n in reversed(sizes)), min))
        cheapest = dict(zip(reversed(sizes), later, strict=True))
        tail = [expected_tokens(alpha, length - 1) for length in range(branch_max + 1)]
        for main in {k, k // 2, min(max(offered) + 1, lookup.available, k_max)}:
            forks = [d for d in offered if d < main or d == main == lookup.available]
            # What a branch at each fork adds per token its tail is expected to give: it is
            # reached when the chain is accepted that far and then misses (or ends), and taken
            # as often as forks were; a second fork at the same depth counts half.
            reach = [
                alpha**d
                * ((1.0 - alpha) if d < main else 1.0)
                * self.state.fork_hit[DraftKind.LOOKUP]
                * 0.5 ** forks[:i].count(d)
                for i, d in enumerate(forks)
            ]
            chain = expected_tokens(alpha, main)
            first = next((n for n in sizes if n > main), None)
            if first is None or (chain + sum(reach) * tail[-1]) / cheapest[first] <= chain_speed:
                continue
            for width in range(1, len(forks) + 1):
                for n in sizes:
                    if n - main < width:
                        continue
                    if n - main > width * branch_max:
                        break
                    # The branches' lengths as the drafter shares the nodes out (branch_lengths)
                    share, extra = divmod(n - main, width)
                    gain = sum(reach[i] * tail[share + (i < extra)] for i in range(width))
                    speed = (chain + gain) / cost[n]
                    if speed > best[0]:
                        best = (speed, Shape(main, width + 1, n))
        return best

    def choose(self, proposals: Sequence[Proposal]) -> AutoChoice | None:
        """This round's proposal and shape (K 0: a plain step; None: one with nothing to
        learn but its time)."""
        # The costs are shared by every generation: this round is priced at its own pass's load.
        self._pass = Load(*self._load()) if self._load is not None else ALONE
        return self._choose(proposals)

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        """What `choice` (this policy's, from `choose`) gave: the round's event and the time
        it took, from its start to its tokens' emission (the next round starts then)."""
        chosen = choice if isinstance(choice, AutoChoice) else None
        self._learn_costs(chosen, round_, seconds)
        self.state.confirmed = False
        if chosen is not None and chosen.shadow:
            self._learn_shadow(chosen, round_)
            chosen = None
        self._count(round_, chosen)
        if chosen is not None:
            self._learn(chosen, round_)

    def _learn_costs(self, chosen: AutoChoice | None, round_: RoundEvent, seconds: float) -> None:
        """Check the round's predicted time against `seconds`, and learn the costs from it."""
        drafts = chosen is not None and not chosen.shadow and (chosen.k > 0 or chosen.width > 1)
        source: str  # a drafter's kind, or a lookup's source (`suffix`)
        if chosen is None or not drafts:
            kind, source, behind, predicted = (
                None,
                DrafterKind.NONE,
                0,
                self.costs.plain_s(self._pass),
            )
        else:
            proposal = chosen.proposal
            kind, source, predicted = proposal.kind, _source(proposal), chosen.predicted_s
            behind = proposal.behind if isinstance(proposal, ModelProposal) else 0
            if kind is DraftKind.MODEL and round_.tree is None:
                # The draft stopped itself: the prediction is of the round that ran.
                predicted = self.costs.model_round_s(
                    round_.drafted, self._pass
                ) + self.costs.prefill_s(kind, behind)
        self.costs.accuracy.add(source, predicted, seconds)
        if self.costs.learn:
            self.costs.observe(
                round_, kind if round_.drafted else None, seconds, behind, self._pass
            )

    def _learn_shadow(self, chosen: AutoChoice, round_: RoundEvent) -> None:
        """A plain step's undrafted lookup: was its first token the target's?"""
        guess = chosen.proposal.next if isinstance(chosen.proposal, Lookup) else None
        if guess is not None and not round_.drafted and round_.target_token is not None:
            hit = float(round_.target_token == guess)
            self.state.confirmed = bool(hit) and chosen.bucket in COPIES
            rate = self.state.alpha[chosen.bucket]
            self.state.alpha[chosen.bucket] = _moved(rate, hit, self.config.shadow_weight)

    def _choose(self, proposals: Sequence[Proposal]) -> AutoChoice | None:
        # The fastest proposal; on a tie, the more tokens, then the first offered (a lookup).
        chosen: Proposal | None = None
        speed, shape = 1.0, Shape(0)
        for proposal in proposals:
            option_speed, option_shape = self._best(proposal)
            if (option_speed, option_shape.k) > (speed, shape.k):
                chosen, speed, shape = proposal, option_speed, option_shape
        probe = chosen is None
        if chosen is None:
            chosen = self._probe(proposals)
            if chosen is None:
                return self._shadow(proposals)
            shape = Shape(min(self.config.probe_k, self.k_max, chosen.available))
        self.state.idle_rounds = 0
        key = bucket(chosen, self.config)
        if key is not self.state.last_bucket:
            self.state.switches += self.state.last_bucket is not None
            self.state.last_bucket = key
        stop = None
        if isinstance(chosen, ModelProposal):
            if shape.width == 1:
                # The chain's length is the stop rule's to decide, token by token, from the
                # draft's confidence: K only bounds it. So a probe of the model is a round like
                # any other, drafting what the draft is sure enough of (a one-token probe says
                # little about rounds whose length follows the draft's confidence).
                shape = Shape(min(self.k_max, chosen.available))
            stop = self.stop_rule(shape.k, speed / self.costs.plain_s(self._pass))
        fresh = isinstance(chosen, ModelProposal) and chosen.behind > self.costs.config.catch_up
        behind = chosen.behind if isinstance(chosen, ModelProposal) else 0
        extra = shape.nodes - shape.k if shape.width > 1 else 0
        if shape.k == 0 and shape.width == 1:
            predicted = self.costs.plain_s(self._pass)
        else:
            predicted = self.costs.round_s(chosen.kind, shape.k, behind, extra, self._pass)
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
        """A plain step that checks the first lookup's next token for free (None: none)."""
        for p in proposals:
            if isinstance(p, Lookup) and p.next is not None:
                plain = self.costs.plain_s(self._pass)
                return AutoChoice(
                    p, 0, bucket=bucket(p, self.config), shadow=True, predicted_s=plain
                )
        return None

    def _probe(self, proposals: Sequence[Proposal]) -> Proposal | None:
        """After a while without speculation, a one-token draft, so that a change in the text
        (say, the answer starts copying code from the prompt) is noticed. A model probe first
        reads what the draft missed since it last drafted: it runs only where that costs at most
        `probe_budget` of the rounds waited."""
        config = self.config
        self.state.idle_rounds += 1
        strong: list[Proposal] = [
            p for p in proposals if isinstance(p, Lookup) and p.match >= config.probe_min_match
        ]
        waited = config.probe_budget * self.state.idle_rounds * self.costs.plain_s(self._pass)
        model: list[Proposal] = [
            p
            for p in proposals
            if isinstance(p, ModelProposal)
            and self.costs.round_s(DraftKind.MODEL, config.probe_k, p.behind, load=self._pass)
            - self.costs.plain_s(self._pass)
            <= waited
        ]
        if self.state.idle_rounds < self.state.probe_after or not (strong or model):
            return None
        self.state.probes += 1
        return (strong or model)[0]

    def _learn(self, chosen: AutoChoice, round_: RoundEvent) -> None:
        """The acceptance rates, probes' wait, forks' rate and confidence a round teaches."""
        config = self.config
        kind = chosen.proposal.kind
        if chosen.probe:
            failed = round_.accepted < round_.drafted
            self.state.probe_after = (
                min(self.state.probe_after * 2, config.probe_max) if failed else config.probe_after
            )
        drafted, accepted = round_.drafted, round_.accepted
        tree = round_.tree
        if tree is not None:  # the main chain's acceptance; the branches teach the fork rate
            drafted, accepted = tree.main_drafted, tree.main_accepted
            if tree.offered:
                rates = self.state.fork_hit
                rates[kind] = _moved(rates[kind], float(tree.taken), config.ema_weight)
        if chosen.fresh:
            # The draft model's first draft after reading new context (an answer's first
            # tokens, mostly) says little about the drafts after it: learned, one miss there
            # priced the model below plain decoding for the rest of the answer.
            return
        if chosen.bucket in COPIES and drafted and accepted == drafted:
            self.state.proven = max(self.state.proven, accepted)
        if kind is DraftKind.MODEL and tree is None:
            self._learn_model_round(drafted, accepted)
        if kind is DraftKind.MODEL and drafted:
            self.state.confidence.judge(round_.confidence[:drafted], accepted)
        alpha = self.state.alpha[chosen.bucket]
        for _ in range(accepted):
            alpha = _moved(alpha, 1.0, config.ema_weight)
        if accepted < drafted:
            alpha = _moved(alpha, 0.0, config.ema_weight)
        self.state.alpha[chosen.bucket] = alpha

    def _count(self, round_: RoundEvent, chosen: AutoChoice | None) -> None:
        """What a lookup round saved over plain decoding, in target steps, at the costs
        learned (the draft model's rounds are its own to judge: `ModelRounds`)."""
        self.answer.generated += round_.forced + round_.accepted + 1
        if chosen is None or chosen.proposal.kind is not DraftKind.LOOKUP or not round_.drafted:
            return
        steps = self.costs.steps(
            DraftKind.LOOKUP, round_.drafted, self._pass
        )  # a tree: all its nodes
        self.answer.gained += round_.accepted + 1 - steps


def _source(proposal: Proposal) -> str:
    """The name of the drafter behind a proposal, as stats show it."""
    return proposal.source if isinstance(proposal, Lookup) else proposal.drafter.name
