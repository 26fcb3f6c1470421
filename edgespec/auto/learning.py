"""What the policy learns about the text from each round, kept across a conversation."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from edgespec.auto.confidence import ConfidencePower
from edgespec.auto.config import AUTO, AutoConfig, PolicyConfig
from edgespec.engine.drafters import Choice, DraftKind, Lookup, ModelProposal, Proposal
from edgespec.engine.events import RoundEvent


class Bucket(Enum):
    """Which acceptance rate a draft counts for: few, so that each learns from many rounds."""

    SHORT = "short"
    LONG = "long"
    COPY = "copy"
    RESUMED = "resumed"  # a copy that takes up again the source it left
    MODEL = "model"


COPIES = (Bucket.COPY, Bucket.RESUMED)


def bucket(proposal: Proposal, config: PolicyConfig = AUTO.policy) -> Bucket:
    if isinstance(proposal, ModelProposal):
        return Bucket.MODEL
    if proposal.resumed:
        return Bucket.RESUMED
    if proposal.match >= config.copy_match:
        return Bucket.COPY
    return Bucket.LONG if proposal.match >= config.long_match else Bucket.SHORT


@dataclass
class ModelRounds:
    """Moving averages over the draft model's rounds: tokens a round gave, and its seconds."""

    tokens: float
    seconds: float

    def add(self, tokens: int, seconds: float, weight: float) -> None:
        self.tokens += weight * (tokens - self.tokens)
        self.seconds += weight * (seconds - self.seconds)


@dataclass(frozen=True, kw_only=True)
class AutoChoice(Choice):
    """A round's choice; `shadow`: a plain step checking the lookup's first token for free."""

    bucket: Bucket
    probe: bool = False
    fresh: bool = False  # the draft model's first draft after reading new context
    shadow: bool = False
    predicted_s: float


def _moved(rate: float, trial: float, weight: float) -> float:
    return rate + weight * (trial - rate)


@dataclass
class AdaptiveState:
    config: PolicyConfig = AUTO.policy
    alpha: dict[Bucket, float] = field(init=False)
    idle_rounds: int = 0
    probe_after: int = field(init=False)
    switches: int = 0
    probes: int = 0
    last_bucket: Bucket | None = None
    # How often the target took a branch where the chain missed, per kind of tree.
    fork_hit: dict[DraftKind, float] = field(init=False)
    confidence: ConfidencePower = field(default_factory=ConfidencePower)
    model_rounds: ModelRounds | None = None
    proven: int = 0  # the longest copy accepted in full
    confirmed: bool = False  # the last shadow's first token was right

    def __post_init__(self) -> None:
        config = self.config
        self.alpha = {
            Bucket.SHORT: config.prior_short,
            Bucket.LONG: config.prior_long,
            Bucket.COPY: config.prior_copy,
            Bucket.RESUMED: config.prior_resume,
            Bucket.MODEL: config.prior_model,
        }
        self.probe_after = config.probe_after
        self.fork_hit = {
            DraftKind.LOOKUP: config.fork_prior_lookup,
            DraftKind.MODEL: config.fork_prior_model,
        }

    def learn_shadow(self, chosen: AutoChoice, round_: RoundEvent) -> None:
        guess = chosen.proposal.next if isinstance(chosen.proposal, Lookup) else None
        if guess is not None and not round_.drafted and round_.target_token is not None:
            hit = float(round_.target_token == guess)
            self.confirmed = bool(hit) and chosen.bucket in COPIES
            rate = self.alpha[chosen.bucket]
            self.alpha[chosen.bucket] = _moved(rate, hit, self.config.shadow_weight)

    def learn(self, chosen: AutoChoice, round_: RoundEvent) -> None:
        config = self.config
        kind = chosen.proposal.kind
        if chosen.probe:
            failed = round_.accepted < round_.drafted
            self.probe_after = (
                min(self.probe_after * 2, config.probe_max) if failed else config.probe_after
            )
        drafted, accepted = round_.drafted, round_.accepted
        tree = round_.tree
        if tree is not None:  # the branches teach the fork rate, the chain the acceptance
            drafted, accepted = tree.main_drafted, tree.main_accepted
            if tree.offered:
                self.fork_hit[kind] = _moved(
                    self.fork_hit[kind], float(tree.taken), config.ema_weight
                )
        if chosen.fresh:
            # Its first draft after new context says little about the drafts after it.
            return
        if chosen.bucket in COPIES and drafted and accepted == drafted:
            self.proven = max(self.proven, accepted)
        if kind is DraftKind.MODEL and drafted:
            self.confidence.judge(round_.confidence[:drafted], accepted)
        alpha = self.alpha[chosen.bucket]
        for _ in range(accepted):
            alpha = _moved(alpha, 1.0, config.ema_weight)
        if accepted < drafted:
            alpha = _moved(alpha, 0.0, config.ema_weight)
        self.alpha[chosen.bucket] = alpha


def fresh_state(config: AutoConfig = AUTO) -> AdaptiveState:
    return AdaptiveState(config.policy, confidence=ConfidencePower(config.confidence))
