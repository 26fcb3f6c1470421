"""Every tuning constant of `auto`. A value is a guess (never measured) unless its note says
"tuned" or "measured" (the figures: docs/tuning.md, The auto policy's constants; `prompt_steps`:
Prompt chunks) or names another source."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgespec.options import TREE_WIDTH


@dataclass(frozen=True, kw_only=True)
class SuffixConfig:
    """The suffix drafter's (`suffix.py`, `edits.py`, `index.py`)."""

    max_n: int = 8  # longest n-gram indexed; a guess (method: SuffixDecoding, Oliaro et al. 2024)
    min_n: int = 2  # shortest n-gram looked up (1-token matches recur by chance)
    min_share: float = 0.5  # a lookup follows a continuation this common
    fork_share: float = 0.1  # a tree branches at continuations this common
    fork_candidates: int = 3  # other continuations weighed per position
    tree_forks: int = TREE_WIDTH - 1  # one per leaf beside the main chain
    session_tokens: int = 1 << 18  # earlier generations' tokens kept per session: a memory bound
    clients: int = 64  # clients whose sessions are kept: a memory bound
    clients_tokens: int = 1 << 19  # tokens all sessions hold together: a memory bound
    copy_min: int = 8  # shortest match a copy follows (shorter ones recur by chance)
    copy_sources: int = 4  # recent places a copy may follow
    copy_reach: int = 64  # how far back a copy's match is compared
    edit_max: int = 8  # longest replaced span learned as an edit
    edit_growth: int = 2  # how much longer an edit's replacement may be; tuned
    resume_window: int = 8  # how far past where the output left its source a copy resumes; tuned
    resume_min: int = 3  # fewest matching tokens to resume a copy; tuned


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """The per-round policy's (`policy.py`, `learning.py`, `budget.py`, `shapes.py`)."""

    long_match: int = 4  # lookups this long are learned apart from shorter ones
    copy_match: int = 8  # a match as long as the index holds (max_n): text being copied
    prior_short: float = 0.5  # acceptance prior, lookups shorter than long_match
    prior_long: float = 0.75  # acceptance prior, longer lookups
    prior_copy: float = 0.95  # acceptance prior, copies: high, so that they are tried
    prior_resume: float = 0.9  # acceptance prior, resumed copies; tuned
    prior_model: float = 0.85  # acceptance prior, the draft model; tuned
    ema_weight: float = 0.1  # per drafted token, in the acceptance's moving average
    model_round_weight: float = 0.05  # per draft-model round, in its rounds' averages; tuned
    alpha_cap: float = 0.98  # the highest acceptance rate K is chosen with; tuned
    shadow_weight: float = 0.05  # an undrafted first token's weight as a trial; tuned
    lookup_risk: float = 1.0  # target steps a lookup may waste before copying is proven; tuned
    copy_proof: int = 2  # a copy this long accepted in full proves the text is copied; tuned
    copy_growth: int = 4  # until then, a draft up to this times the longest such copy; tuned
    risk_base: float = 4.0  # target steps a lookup may always risk; tuned
    risk_gear: float = 2.0  # ...plus this times what the answer's lookups gained; tuned
    risk_share: float = 0.01  # ...plus this share of the tokens written; tuned
    probe_after: int = 32  # rounds without speculation before a one-token probe
    probe_max: int = 256  # the wait doubles after each failed probe, up to this
    probe_min_match: int = 3  # lookup probes only on matches at least this long
    probe_k: int = 1  # a probe's draft length
    probe_budget: float = 0.05  # a model probe's catch-up: at most this share of the wait
    fork_prior_lookup: float = 0.3  # how often a lookup tree's branch is taken
    fork_prior_model: float = 0.5  # how often the draft's second choice is taken; tuned
    branch_max: int = 8  # tokens on one branch (its chance of being reached is small)
    young_tokens: int = 64  # a lane still in its first this many is yielded to
    yield_delay: float = 0.1  # what a yielding lane's round may add to a plain step


@dataclass(frozen=True, kw_only=True)
class CostConfig:
    """The learned round costs' (`costs.py`)."""

    prior_weight: float = 4.0  # observations the calibration is worth
    per_n_weight: float = 8.0  # evidence needed to correct one verification size
    horizon: float = 64.0  # recent observations an estimate follows
    clip: float = 4.0  # one observation moves an estimate by at most this factor
    errors_kept: int = 4096  # predicted-vs-measured errors kept per drafter: a memory bound
    catch_up: int = 8  # tokens the draft reads after its own round before it is a prefill
    amortize_tokens: int = 128  # a prefill is spread over at most this many tokens
    lookup_share: float = 0.25  # a lookup's cost as a share of a round's overhead
    prompt_steps: float = 17.7  # plain steps a prompt chunk may add to a shared pass; measured
    prompt_most: int = 512  # the longest chunk priced: edgespec's n_batch (llamacpp/model.py)


@dataclass(frozen=True, kw_only=True)
class ConfidenceConfig:
    """The draft confidence's calibration (`confidence.py`)."""

    gammas: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2)  # tuned
    min_judged: int = 32  # tokens judged before the draft's word is doubted
    horizon: int = 512  # tokens after which old judgements fade


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """What the plan decides before loading (`planner/decide.py`) from the same costs."""

    model_alpha: float = 0.9  # the draft model is loaded if at this acceptance...
    model_margin: float = 1.05  # ...some K beats plain decoding by this margin
    round_overhead_s: float = 0.0015  # per-round Python overhead in seconds; measured
    lookup_showcase_alpha: float = 0.95  # the plan's example of text that repeats
    tree_showcase_alpha: float = 0.6  # the plan's example of text that went several ways


@dataclass(frozen=True, kw_only=True)
class AutoConfig:
    suffix: SuffixConfig = field(default_factory=SuffixConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    costs: CostConfig = field(default_factory=CostConfig)
    confidence: ConfidenceConfig = field(default_factory=ConfidenceConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)


AUTO = AutoConfig()
