"""Every tuning constant of `auto`, each with where it comes from.

"Replayed" means `scripts/replay_policy.py` on the built-in suites' greedy outputs (1.5B target,
0.5B draft), charged with the tau measured on this project's 2-core EPYC machines; the numbers
are in `benchmarks/HISTORY.md`. "A guess" means nobody measured it: a value to test before
trusting. The components take their section as a constructor argument (default: `AUTO`) and
never read a module global while they run, so a benchmark can try other values without
patching the library.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgespec.options import TREE_WIDTH


@dataclass(frozen=True, kw_only=True)
class SuffixConfig:
    """The suffix drafter (`suffix.py`): lookups, copies, edits and resumed copies."""

    max_n: int = 8  # longest n-gram indexed; a guess, after SuffixDecoding (Oliaro et al. 2024)
    min_n: int = 2  # shortest n-gram looked up; a guess (1-token matches recur by chance)
    # a lookup follows a continuation seen at least this share of the time; a guess
    min_share: float = 0.5
    fork_share: float = 0.1  # a tree branches at continuations this common; a guess
    fork_candidates: int = 3  # other continuations weighed per position; a guess
    tree_forks: int = TREE_WIDTH - 1  # forks offered: one per leaf the target verifies beside
    session_tokens: int = 1 << 18  # earlier generations kept per session: a memory bound
    clients: int = 64  # a server's clients whose session indexes are kept: a memory bound
    # the tokens all clients' sessions hold together (the persistent memory aside): a memory
    # bound across clients, which the per-session bound alone multiplied by `clients`
    clients_tokens: int = 1 << 19
    copy_min: int = 8  # shortest match a copy follows; a guess (shorter ones recur by chance)
    # recent occurrences a copy may follow; a guess (copying itself: 26.1 tokens held a copy
    # on code editing against 22.1 re-voting every token, replayed)
    copy_sources: int = 4
    copy_reach: int = 64  # how far back a copy's match is compared; a guess
    edit_max: int = 8  # longest replaced span learned as an edit; a guess
    # an edit may grow its span by this much; replayed on 16 held-out edits (1-3 the same,
    # unbounded 5 % slower where verifying is steep)
    edit_growth: int = 2
    # a resumed copy looks this far past where the output left its source; replayed (editing suites)
    resume_window: int = 8
    # fewest matching tokens to resume a copy; replayed: the source's token 80-100 % of the time
    resume_min: int = 3


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """The per-round policy (`policy.py`): acceptance priors, learning, probes, trees."""

    long_match: int = 4  # lookups this long are learned apart from shorter ones; a guess
    copy_match: int = 8  # a match as long as the suffix index holds: text being copied (max_n)
    prior_short: float = 0.5  # acceptance prior, lookups shorter than long_match; a guess
    prior_long: float = 0.75  # acceptance prior, longer lookups; a guess
    # acceptance prior, copies: high so that a copy is tried where verifying is steep; a guess
    prior_copy: float = 0.95
    # acceptance prior, resumed copies; replayed: the next token right at 80-100 % (editing suites)
    prior_resume: float = 0.9
    # acceptance prior, draft model: the 0.5B draft's first choice was the target's at 72-98 %
    # of the suites' positions; replayed on a flat tau (code generation 1.94x, 1.18x at 0.7)
    prior_model: float = 0.85
    ema_weight: float = 0.1  # per drafted token, in the acceptance's moving average; a guess
    # per draft-model round, in its rounds' averages; replayed on the heavy pair's dev prompts
    # (0.15: 1.46x plain, 0.05: 1.52x; a drop below plain decoding stuck for the answer)
    model_round_weight: float = 0.05
    # K is chosen with at most this rate; replayed (0.99: code editing 1.04x vs 1.11x plain)
    alpha_cap: float = 0.98
    # weight of a round's undrafted first token as a trial, half a drafted one's; replayed
    # (a whole one: summarization 1.030x -> 1.022x plain; half: code editing 1.114x -> 1.128x)
    shadow_weight: float = 0.05
    # target steps a lookup round may cost beyond a plain step before the text is known to be
    # copied: a chance match in prose missing at its first token cost a whole 16-token
    # verification. Replayed on three CPUs' tau and a flat one (benchmarks/never-lose): 1.0
    # leaves flat devices as they were; 0.5 cost code editing 3 % there; ramps that let the
    # first copy draft 2-3 tokens cost code editing 3-8 % on the AVX-512 EPYC. Judged on the
    # built-in suites it was tuned on (not held out); the heavy pair's heldout3 saw no cost
    lookup_risk: float = 1.0
    # a copy accepted in full of this many tokens shows the text is copied; until then, one
    # accepted in full earns a draft `copy_growth` times as long. Live, in prose, one-token
    # copies taken in full were followed by 16-token drafts that missed (about 10 target steps
    # each, 7-10 % of an answer). Replayed on the built-in suites (tuned on them: not held
    # out), 2 and 4 against 1 and 2: lowest chat and code-generation prompt 0.957 -> 0.981 and
    # 0.969 -> 0.989 plain with this CPU's tau (AVX-512 EPYC), code editing 1.3 % lower there
    # and with the family-26 EPYC's, unchanged with the AVX2 EPYC's
    copy_proof: int = 2
    copy_growth: int = 4
    # A lookup round may risk (the steps beyond a plain one it costs if its first token is
    # wrong) at most `risk_base` target steps, plus `risk_gear` times what the answer's lookup
    # rounds gained so far over plain decoding (or minus what they lost), plus `risk_share` of
    # the tokens written so far, and never less than `lookup_risk`: what a copy can lose is
    # held to what copies have won. Proof of copying alone still let chats that echo their own
    # phrases lose 15-token copies one after another (0.938x). Replayed on the built-in suites
    # and two held-out sets, greedy and three answers each at 0.7, three CPUs' tau
    # (benchmarks/never-lose/results-budget; tuned on those): prompts under 0.97x 13 -> 1 of
    # 294; on a third set written before it was tried, 4 -> 2 of 90 (lowest 0.917x ->
    # 0.959x); code editing 0.1-0.5 % and editing sessions up to 1.1 % lower. As committed,
    # on two more sets written after it froze (never-lose/results-heldout4): 8 -> 0 of 180
    risk_base: float = 4.0
    risk_gear: float = 2.0
    risk_share: float = 0.01
    probe_after: int = 32  # rounds without speculation before a one-token probe; a guess
    probe_max: int = 256  # the wait doubles after each failed probe, up to this; a guess
    probe_min_match: int = 3  # lookup probes only on matches at least this long; a guess
    probe_k: int = 1  # a probe's draft length; a guess
    # a model probe's catch-up may cost this share of the rounds waited; a guess (unbounded,
    # model probes cost code generation 28 % on the 2-core EPYC)
    probe_budget: float = 0.05
    fork_prior_lookup: float = 0.3  # how often a lookup tree's branch was taken; a guess
    # how often the draft's second choice was the target's where its first missed: 47-80 %
    fork_prior_model: float = 0.5
    branch_max: int = 8  # tokens on one branch; a guess (its chance of being reached is small)


@dataclass(frozen=True, kw_only=True)
class CostConfig:
    """The round costs learned from the rounds that run (`costs.py`)."""

    prior_weight: float = 4.0  # observations the calibration is worth; a guess
    per_n_weight: float = 8.0  # evidence needed to correct one verification size; a guess
    horizon: float = 64.0  # recent observations an estimate follows; a guess
    clip: float = 4.0  # one observation moves an estimate by at most this factor; a guess
    errors_kept: int = 4096  # predicted-vs-measured errors kept per kind: a memory bound
    # tokens the draft reads after a round of its own before it counts as a prefill; a guess
    catch_up: int = 8
    # a prefill is spread over at most this many tokens to come; a guess (answers run 100s)
    amortize_tokens: int = 128
    lookup_share: float = 0.25  # a lookup's cost as a share of a round's overhead; a guess


@dataclass(frozen=True, kw_only=True)
class ConfidenceConfig:
    """How far the draft model's own probabilities are trusted (`confidence.py`)."""

    # confidence ** gamma: the 0.5B draft was right 45 % at p 0.3-0.5, 93 % at 0.8-0.9 (suites)
    gammas: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2)
    min_judged: int = 32  # tokens judged before the draft's word is doubted; a guess
    horizon: int = 512  # tokens after which old judgements fade; a guess


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """What the plan decides before loading (`planner/plan.py`) from the same costs."""

    model_alpha: float = 0.9  # the draft model is loaded if at this acceptance...; a guess
    model_margin: float = 1.05  # ...some K beats plain decoding by this margin; a guess
    # per-round Python overhead in seconds: 1.4 ms measured, 1.5B target, 2-core EPYC
    round_overhead_s: float = 0.0015
    lookup_showcase_alpha: float = 0.95  # the plan's example of text that repeats; a guess
    tree_showcase_alpha: float = 0.6  # the plan's example of text that went several ways; a guess


@dataclass(frozen=True, kw_only=True)
class AutoConfig:
    suffix: SuffixConfig = field(default_factory=SuffixConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    costs: CostConfig = field(default_factory=CostConfig)
    confidence: ConfidenceConfig = field(default_factory=ConfidenceConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)


AUTO = AutoConfig()
