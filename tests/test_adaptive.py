"""The adaptive policy of `auto`: which drafter and K each round, learned from what the
target accepts."""

from __future__ import annotations

from dataclasses import replace

from edgespec.auto.confidence import ConfidencePower
from edgespec.auto.config import AUTO
from edgespec.auto.learning import AdaptiveState, Bucket, bucket
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.engine.drafters import (
    Choice,
    Drafter,
    DraftKind,
    EitherDrafter,
    Lookup,
    ModelDrafter,
    NgramDrafter,
)
from edgespec.engine.events import RoundEvent
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.verify import EMPTY_DRAFT, Draft
from edgespec.options import AutoSwitches
from tests.fakes import FakeModel
from tests.machines import CPU_TAU, GPU_TAU, STEEP_TAU
from tests.proposals import drafts, lookup, model

NO_RAMP = AutoSwitches(ramp=False)


class AlwaysMatch(NgramDrafter):
    """A lookup that always finds a long match, so only the adaptive logic is under test."""

    def offer(self, tokens, room):  # type: ignore[no-untyped-def]
        return [lookup(room, 4, first=5)]


def one_round(
    policy: AdaptiveDraftLength, drafter: Drafter, tokens: list[int], room: int = 32
) -> tuple[Choice | None, Draft]:
    """What the engine does to choose and draft a round."""
    choice = policy.choose(drafter.offer(tokens, room))
    if choice is None or choice.k == 0:
        return choice, EMPTY_DRAFT
    return choice, choice.proposal.draft(choice.k, Sampler(SamplingParams()), choice.stop)


def run_rounds(
    policy: AdaptiveDraftLength, drafter: Drafter, accept: bool, rounds: int = 40
) -> list[int]:
    """Each round accepts the whole draft (accept=True) or rejects its first token."""
    tokens = [1, 2, 3]
    drafter.begin(tokens)
    ks = []
    for _ in range(rounds):
        choice, draft = one_round(policy, drafter, tokens)
        ks.append(len(draft.tokens))
        new = [*draft.tokens, 5] if accept else [6]
        drafter.commit([*tokens, *new])
        accepted = len(draft.tokens) if accept else 0
        event = RoundEvent(
            drafter=draft.source, k=len(draft), drafted=len(draft), accepted=accepted
        )
        policy.observe(choice, event, 0.0)
        tokens = [*tokens, *new]
    return ks


def test_a_copy_match_is_drafted_where_verification_is_steep() -> None:
    """An 8-token match (text being copied) starts from a high acceptance rate, so a steep
    device still tries it; a 4-token match does not pay there; a copy that misses stops.
    (Pricing alone: with `ramp` on, a copy in a new text also waits for its first token to be
    proved right, below.)"""
    policy = AdaptiveDraftLength(CostModel(STEEP_TAU, 0.0), switches=NO_RAMP)
    copy = lookup(32, 8)
    assert bucket(copy) is Bucket.COPY
    choice = policy.choose([copy])
    assert choice is not None and choice.proposal is copy and choice.k >= 1
    assert not drafts(policy.choose([lookup(32, 4)]))
    for _ in range(3):
        again = policy.choose([copy])
        policy.observe(
            again, RoundEvent(drafter="suffix", k=choice.k, drafted=choice.k, accepted=1), 0.0
        )
    assert not drafts(policy.choose([copy]))


def test_a_lookup_that_takes_up_a_copy_again_is_priced_near_a_copy() -> None:
    """A 4-token match that resumes the source a copy left (an edit made) is drafted where
    verification is steep; the same match without a copy behind it is not."""
    policy = AdaptiveDraftLength(CostModel(STEEP_TAU, 0.0), switches=NO_RAMP)
    resumed = lookup(32, 4, resumed=True)
    assert bucket(resumed) is Bucket.RESUMED
    choice = policy.choose([resumed])
    assert choice is not None and choice.proposal is resumed and choice.k >= 1
    assert not drafts(policy.choose([replace(resumed, resumed=False)]))


def test_rounds_that_draft_nothing_still_teach_whether_the_lookup_was_right() -> None:
    """After a copy missed, nothing pays on a steep device; the target's own tokens then show
    whether the lookup's first token would have been accepted: right, and the copy is drafted
    again within a few rounds; wrong, or not told, and it is not (until a probe). (The rate
    alone: `ramp` off.)"""

    def rounds_until_drafting(target_token: int | None) -> int | None:
        policy = AdaptiveDraftLength(CostModel(STEEP_TAU, 0.0), switches=NO_RAMP)
        copy = lookup(32, 8, first=42)
        choice = policy.choose([copy])
        assert choice is not None
        k = choice.k
        policy.observe(
            choice, RoundEvent(drafter="suffix", k=k, drafted=k, accepted=0, target_token=7), 0.0
        )
        for i in range(20):
            plain = policy.choose([copy])
            if drafts(plain):
                return i
            event = RoundEvent(
                drafter="none", k=0, drafted=0, accepted=0, target_token=target_token
            )
            policy.observe(plain, event, 0.0)
        return None

    resumed = rounds_until_drafting(42)
    assert resumed is not None and resumed <= 10
    assert rounds_until_drafting(7) is None
    assert rounds_until_drafting(None) is None


def test_adaptive_k_grows_with_acceptance_and_shrinks_with_rejections() -> None:
    # K from the learned rate alone (`ramp` off: no copy has to prove itself first).
    policy, drafter = AdaptiveDraftLength(CostModel(CPU_TAU, 0.0), switches=NO_RAMP), AlwaysMatch()
    ks_good = run_rounds(policy, drafter, accept=True)
    assert ks_good[0] < ks_good[-1] and ks_good[-1] >= 8
    alpha_high = policy.state.alpha[Bucket.LONG]
    ks_bad = run_rounds(policy, drafter, accept=False, rounds=200)
    alpha_low = policy.state.alpha[Bucket.LONG]
    assert alpha_low < alpha_high
    assert policy.costs.best_k(DraftKind.LOOKUP, alpha_low, 32)[0] == 0
    assert ks_bad[0] >= 8 and 0 in ks_bad[:6] and ks_bad[-1] == 0
    # Off, then probed with one token now and then, less often after each failed probe.
    probes = [i for i, k in enumerate(ks_bad) if k == 1 and i > 20]
    assert len(probes) >= 2 and probes[1] - probes[0] > 32


def test_adaptive_k_respects_the_cap() -> None:
    free = AdaptiveDraftLength(CostModel(GPU_TAU, 0.0))
    assert max(run_rounds(free, AlwaysMatch(), accept=True)) > 5
    capped = AdaptiveDraftLength(CostModel(GPU_TAU, 0.0), k_max=5)
    assert max(run_rounds(capped, AlwaysMatch(), accept=True)) == 5


def test_adaptive_uses_the_model_only_when_it_pays() -> None:
    text = [1, 2, 3, 4, 5, 6, 7, 9]  # no repeated n-gram: only the model can draft
    cpu_model = ModelDrafter(FakeModel(seed=1))
    cpu = AdaptiveDraftLength(CostModel(CPU_TAU, 0.58))
    either = EitherDrafter(NgramDrafter(), cpu_model)
    either.begin(text)
    assert one_round(cpu, either, text, room=8)[1].tokens == []
    gpu_model = ModelDrafter(FakeModel(seed=1))
    gpu = AdaptiveDraftLength(CostModel(GPU_TAU, 0.1))
    either = EitherDrafter(NgramDrafter(), gpu_model)
    either.begin(text)
    _, draft = one_round(gpu, either, text, room=8)
    assert 1 <= len(draft.tokens) <= 8 and draft.source == "model"


def plain_rate(policy: AdaptiveDraftLength) -> float:
    """Plain decoding's speed in tokens per second: the least a drafted token must earn."""
    return 1.0 / policy.costs.plain_s()


def test_a_costly_catch_up_does_not_stop_a_sure_model_draft_at_its_first_token() -> None:
    # The draft reads two tokens after each round at 4 draft steps' cost (1.2 target steps):
    # paid before the first token is drafted, so it must not count against that token.
    policy = AdaptiveDraftLength(CostModel(GPU_TAU, 0.3), draft_tau={1: 1.0, 2: 4.0})
    stop = policy.stop_rule(32, plain_rate(policy))
    assert not stop(0, [0.95]) and not stop(3, [0.99, 0.98, 0.96, 0.9])
    assert stop(0, [0.05])  # an unlikely token is still not worth a step
    assert policy.costs.round_s(DraftKind.MODEL, 1) > policy.costs.plain_s() * 2  # the catch-up


def test_a_draft_that_undersells_itself_drafts_further_once_that_is_learned() -> None:
    drafter = ModelDrafter(FakeModel(seed=1))
    policy = AdaptiveDraftLength(CostModel(GPU_TAU, 0.3))
    for _ in range(20):  # drafts of two tokens, each at 0.5, both accepted every time
        choice = policy.choose([model(drafter, 8)])
        assert choice is not None and choice.proposal.kind is DraftKind.MODEL
        event = RoundEvent(drafter="model", k=8, drafted=2, accepted=2, confidence=(0.5, 0.5))
        policy.observe(choice, event, 0.0)
    assert policy.state.confidence.gamma < 1.0
    stop = policy.stop_rule(8, plain_rate(policy))

    def least_sure_third_token() -> float:
        return next(c / 100 for c in range(1, 101) if not stop(2, [0.5, 0.25, c / 100]))

    learned = least_sure_third_token()
    policy.state.confidence = ConfidencePower()  # the draft's word again, all else the same
    assert learned < least_sure_third_token()


def test_a_model_probe_runs_only_where_reading_the_missed_context_is_cheap() -> None:
    """A probe of the draft model first reads every token it missed: on a device where its
    batches are nearly free that is worth a probe every PROBE_AFTER rounds, and the probe is a
    round like any other (the stop rule drafts what the draft is sure enough of, an unlikely
    token not at all); where each token read costs a third of a step it is never worth one."""

    def probes(tau: dict[int, float], c: float, draft_tau: dict[int, float]) -> list[int]:
        drafter = ModelDrafter(FakeModel(seed=1), p_min=0.0)
        policy = AdaptiveDraftLength(CostModel(tau, c), draft_tau=draft_tau)
        policy.state.alpha[Bucket.MODEL] = 0.05  # it does not pay: only probes draft
        chosen = []
        for i in range(100):  # the draft falls one token further behind every round
            choice = policy.choose([model(drafter, 8, behind=i + 3)])
            if choice is not None:
                chosen.append(i)
                assert choice.k == 8 and choice.stop is not None
                assert choice.stop(0, [0.01]) and not choice.stop(0, [0.99])
            policy.observe(choice, RoundEvent(drafter="none", k=0, drafted=0, accepted=0), 0.0)
        return chosen

    flat = {n: 1.0 + 0.02 * (n - 1) for n in (1, 2, 4, 8, 32, 128)}
    assert len(probes(GPU_TAU, 0.3, flat)) >= 2
    cpu_draft = {1: 1.0, 2: 1.87, 4: 2.75, 32: 15.6, 128: 62.0}  # this project's EPYC
    assert probes(STEEP_TAU, 0.68, cpu_draft) == []


def test_a_draft_whose_unsure_tokens_miss_is_kept_while_its_rounds_pay() -> None:
    """Prose: the draft's unsure first tokens miss (one drafted, none accepted) and its sure
    runs are accepted whole. The acceptance rate falls far below what pays, but the rounds as
    the stop rule drafts them still beat plain decoding, so the model stays in use; rounds that
    give nothing do end it."""
    tau = {n: 1.0 + 0.05 * (n - 1) for n in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32)}

    def rounds(sure: tuple[int, int], unsure: int) -> list[int]:
        drafter = ModelDrafter(FakeModel(seed=1))
        policy = AdaptiveDraftLength(CostModel(tau, 0.2))
        used = []
        for i in range(60):
            choice = policy.choose([model(drafter, 32)])
            used.append(int(drafts(choice) and choice.proposal.kind is DraftKind.MODEL))
            if i % (unsure + 1) == 0:  # a sure run, accepted whole
                confidence = (0.99,) * sure[0]
                event = RoundEvent(
                    drafter="model",
                    k=32,
                    drafted=sure[0],
                    accepted=sure[1],
                    tree=None,
                    target_token=1,
                    confidence=confidence,
                )
            else:  # an unsure first token, rejected
                event = RoundEvent(
                    drafter="model",
                    k=32,
                    drafted=1,
                    accepted=0,
                    tree=None,
                    target_token=1,
                    confidence=(0.3,),
                )
            policy.observe(choice, event, 0.0)
        return used

    assert sum(rounds((6, 6), 3)[-20:]) == 20  # alpha ends near 0.6; the rounds pay 1.6x
    assert sum(rounds((1, 0), 3)[-20:]) <= 1  # nothing accepted: plain decoding, a probe at most


def test_a_copy_in_a_new_text_risks_at_most_a_step_until_it_proves_right() -> None:
    """In prose a long match is often chance and misses at its first token, wasting a long
    verification. Until a copy has been accepted in full, a lookup round may cost at most
    `lookup_risk` (one) target step more than a plain one: a one-token draft where verifying 2
    tokens costs under 2 steps; where it costs more, none, and the copy's first token is
    checked against the target's for free instead: right, the copy is drafted in full the next
    round; wrong, it waits again. Once a copy is accepted in full, copies are drafted at once.
    With `ramp` off, or where verifying is nearly flat, the first copy is drafted at once."""
    copy = lookup(32, 8, first=5)
    steeper = {**STEEP_TAU, 2: 2.2}

    def first_k(tau: dict[int, float], ramp: bool = True) -> int:
        choice = AdaptiveDraftLength(CostModel(tau, 0.0), switches=AutoSwitches(ramp=ramp)).choose(
            [copy]
        )
        return 0 if choice is None else choice.k

    def plain_round(target_token: int) -> RoundEvent:
        return RoundEvent(drafter="none", k=0, drafted=0, accepted=0, target_token=target_token)

    long_k = first_k(steeper, ramp=False)
    assert long_k > 1 and first_k(steeper) == 0 and first_k(STEEP_TAU) == 1

    def confirmed(policy: AdaptiveDraftLength) -> Choice:
        """Held back while the copy's first token is wrong, drafted once it is right."""
        for target_token in (6, 5):
            plain = policy.choose([copy])
            assert not drafts(plain)
            policy.observe(plain, plain_round(target_token), 0.0)
        choice = policy.choose([copy])
        assert choice is not None and choice.k == long_k
        return choice

    missed = AdaptiveDraftLength(CostModel(steeper, 0.0))
    choice = confirmed(missed)
    missed.observe(
        choice,
        RoundEvent(drafter="suffix", k=choice.k, drafted=choice.k, accepted=choice.k - 1),
        0.0,
    )
    assert not drafts(missed.choose([copy]))  # a copy that missed proves nothing yet
    copied = AdaptiveDraftLength(CostModel(steeper, 0.0))
    choice = confirmed(copied)
    copied.observe(
        choice, RoundEvent(drafter="suffix", k=choice.k, drafted=choice.k, accepted=choice.k), 0.0
    )
    choice = copied.choose([copy])  # copied in full: the text is being copied
    assert choice is not None and choice.k == long_k
    assert first_k(GPU_TAU) == first_k(GPU_TAU, ramp=False) > 8


def test_a_one_token_copy_taken_in_full_earns_a_short_draft_not_a_long_one() -> None:
    """Where verifying is steep, a chance match in prose drafted one token at a time can be
    right once or twice and then miss: taken for copying, the long draft after it wasted a
    16-token verification. A copy accepted in full earns a draft `copy_growth` times as long
    until one of `copy_proof` tokens was; `auto:proof=0` takes any copy accepted in full."""
    copy = lookup(32, 8, first=5)
    config = AUTO.policy
    assert config.copy_proof > 1

    def after_copies(proof: bool, *lengths: int) -> int:
        """K of the copy drafted after copies of `lengths` were each accepted in full."""
        policy = AdaptiveDraftLength(CostModel(CPU_TAU, 0.0), switches=AutoSwitches(proof=proof))
        for n in lengths:
            choice = policy.choose([copy])
            assert choice is not None and choice.k == n
            policy.observe(choice, RoundEvent(drafter="suffix", k=n, drafted=n, accepted=n), 0.0)
        choice = policy.choose([copy])
        return 0 if choice is None else choice.k

    long_k = after_copies(False, 1)
    grown = after_copies(True, 1)
    assert 1 < grown <= config.copy_growth < long_k
    assert after_copies(True, 1, grown) == long_k  # proved over enough tokens: copied


def test_a_lookup_risks_no_more_than_the_answers_rounds_gained() -> None:
    """A long copy whose first token is wrong loses its whole verification. Such a loss is
    held to `risk_base` target steps plus `risk_gear` times what the answer's rounds gained
    (less what they lost) plus `risk_share` of the tokens written: a copy that pays drafts
    long soon, one that keeps missing cannot go on losing as much; `auto:budget=0` risks any
    length."""
    config = AUTO.policy
    copy = lookup(32, 8, first=5)
    # Verifying 16 tokens costs little more than 8: a copy's best K is 15, whose loss is 4.5.
    tau = {1: 1.0, 2: 1.5, 4: 2.5, 8: 4.5, 16: 5.5, 32: 10.0}

    def policy(budget: bool = True, state: AdaptiveState | None = None) -> AdaptiveDraftLength:
        # No ramp: the budget alone.
        switches = AutoSwitches(ramp=False, budget=budget)
        return AdaptiveDraftLength(CostModel(tau, 0.0), switches=switches, state=state)

    chosen: dict[int, Choice | None] = {}  # each policy's last choice, to hand back

    def k_of(p: AdaptiveDraftLength) -> int:
        choice = chosen[id(p)] = p.choose([copy])
        return 0 if choice is None else choice.k

    def observe(p: AdaptiveDraftLength, k: int, accepted: int) -> None:
        p.observe(
            chosen.pop(id(p), None),
            RoundEvent(drafter="suffix", k=k, drafted=k, accepted=accepted),
            0.0,
        )

    def loss(k: int) -> float:  # target steps lost were the first token wrong
        return tau[k + 1] - 1.0

    def allowed(p: AdaptiveDraftLength) -> float:
        """The rule as documented: never below the ramp's one step."""
        gained = p.budget.gained * (config.risk_gear if p.budget.gained > 0 else 1.0)
        budget = config.risk_base + gained + config.risk_share * p.budget.generated
        return max(budget, config.lookup_risk)

    long_k = k_of(policy(budget=False))
    assert long_k == 15 and loss(long_k) > config.risk_base
    p = policy()
    k = k_of(p)
    assert 0 < k < long_k and loss(k) <= config.risk_base
    # A copy accepted in full: what it saved buys the long draft.
    observe(p, k, k)
    assert p.budget.gained > 0 and k_of(p) == long_k
    # Long copies missed at their first token: what they lost comes off the budget.
    ks = []
    for _ in range(4):
        ks.append(k_of(p))
        assert loss(ks[-1]) <= allowed(p)
        observe(p, ks[-1], 0)
    assert ks[0] == long_k and ks[-1] < long_k and p.budget.gained < 0
    # However much was lost, a one-token copy (a one-step risk) can still win the budget back.
    for _ in range(4):
        observe(p, long_k, 0)
    assert loss(1) <= config.lookup_risk and k_of(p) >= 1
    unbudgeted = policy(budget=False)
    observe(unbudgeted, long_k, 0)
    assert k_of(unbudgeted) == long_k
    # The budget is an answer's: what one answer's copies won does not carry to the next.
    won = policy()
    k = k_of(won)
    observe(won, k, k)
    assert k_of(won) == long_k
    next_answer = policy(state=won.state)  # the next generation's, with what won learned
    assert k_of(next_answer) == k_of(policy()) < long_k


def _state_of(policy: AdaptiveDraftLength) -> str:
    """Everything the policy holds between rounds, as text (its parts have no `==`)."""
    state = policy.state
    return repr((vars(state) | {"confidence": vars(state.confidence)}, vars(policy.budget)))


def test_a_preview_is_the_choice_at_that_rate_and_changes_nothing() -> None:
    """The plan shows what `auto` would do at a given acceptance rate through the policy's
    public preview: the choice a policy that had learned that rate makes, with no state of
    the policy written or read for it."""
    costs = CostModel(GPU_TAU, c=0.1)
    offer = Lookup(tuple(range(16)), 12, "suffix", forks=(0, 1, 2))
    previewing = AdaptiveDraftLength(costs, tree_width=4)
    before = _state_of(previewing)
    learned = AdaptiveDraftLength(costs, tree_width=4)
    learned.state.alpha = {key: 0.6 for key in learned.state.alpha}
    chosen = learned.choose([offer])
    assert chosen is not None
    speed, shape = previewing.preview_lookup(offer, 0.6)
    assert (shape.k, shape.width) == (chosen.k, chosen.width) and speed > 1.0
    assert _state_of(previewing) == before
    model_speed, model_shape = previewing.preview_model(16, 0.9)
    assert model_shape.k > 0 and model_speed > 1.0 and _state_of(previewing) == before
