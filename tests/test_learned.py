"""Costs learned where they are paid: the calibration as the prior, rounds as evidence."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgespec.auto.confidence import ConfidencePower
from edgespec.auto.costs import LearnedCosts, Line, Mean
from edgespec.auto.learning import Bucket
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.engine.drafters import DraftKind, ModelDrafter, ModelProposal
from edgespec.engine.events import RoundEvent
from tests.fakes import FakeModel
from tests.proposals import drafts, lookup, model

STEP = 0.04
TAU = {n: 1.0 + 0.3 * (n - 1) for n in range(1, 18)}


def test_mean_starts_at_the_prior_and_follows_the_evidence() -> None:
    m = Mean(1.0, 4.0, 64.0)
    m.add(2.0)
    assert m.value == pytest.approx(1.2)
    for _ in range(300):
        m.add(2.0)
    assert m.value == pytest.approx(2.0, rel=1e-3)


def test_line_fits_catch_up_and_per_token_costs() -> None:
    line = Line(0.01, 0.01, 4.0, 64.0)
    assert line.at(3) == pytest.approx(0.04)
    for _ in range(200):
        for k in (1, 2, 4, 6):
            line.add(k, 0.05 + 0.02 * k)
    assert line.at(3) == pytest.approx(0.11, rel=0.02)
    assert line.at(8) == pytest.approx(0.21, rel=0.02)


def test_verification_costs_follow_what_rounds_measure() -> None:
    costs = LearnedCosts(CostModel(TAU, 0.3), STEP)
    assert costs.verify_s(8) == pytest.approx(STEP * TAU[8])
    # Through a slower link every verification costs 1.5x the calibration, and n = 8 twice.
    for _ in range(100):
        for n in (1, 4, 8):
            real = STEP * TAU[n] * (3.0 if n == 8 else 1.5)
            round_ = RoundEvent(
                drafter="suffix", k=n - 1, drafted=n - 1, accepted=0, draft_s=0.0001, verify_s=real
            )
            costs.observe(round_, DraftKind.LOOKUP, None)
    assert costs.verify_s(4) == pytest.approx(1.5 * STEP * TAU[4], rel=0.05)
    assert costs.verify_s(8) == pytest.approx(3.0 * STEP * TAU[8], rel=0.05)
    # An n never seen takes the ratio over all rounds (1.5, 1.5 and 3: 2), not the prior.
    assert costs.verify_s(12) == pytest.approx(2.0 * STEP * TAU[12], rel=0.05)


def _costly_model_rounds(policy: AdaptiveDraftLength, option: ModelProposal) -> list[int]:
    """Rounds whose drafts cost two target steps of catch-up plus a step per token (what the
    issue measured: rounds of about 4 target steps, not 2.9), every token accepted; the K of
    each round until none."""
    used = []
    for _ in range(60):
        chosen = policy.choose([option])
        if not drafts(chosen):
            break
        assert chosen is not None
        k = chosen.k
        used.append(k)
        round_ = RoundEvent(
            drafter="model",
            k=k,
            drafted=k,
            accepted=k,
            draft_s=STEP * (2.0 + 1.0 * k),
            verify_s=STEP * TAU[k + 1],
        )
        policy.observe(chosen, round_, round_.draft_s + round_.verify_s)
    return used


def test_a_model_drafter_that_costs_more_than_calibrated_is_dropped() -> None:
    # The calibration says a draft step is cheap (c = 0.1): the model drafter pays at K >= 2.
    option = model(ModelDrafter(FakeModel()), 16)
    fixed = AdaptiveDraftLength(CostModel(TAU, 0.1))  # the calibration only
    assert len(_costly_model_rounds(fixed, option)) == 60  # never finds out
    policy = AdaptiveDraftLength(CostModel(TAU, 0.1), step_s=STEP)
    used = _costly_model_rounds(policy, option)
    assert used[0] >= 2 and len(used) < 20  # plain decoding is faster: found out soon
    prior = LearnedCosts(CostModel(TAU, 0.1), STEP).draft_s(DraftKind.MODEL, used[-1])
    learned = policy.costs.draft_s(DraftKind.MODEL, used[-1])
    # Moved from the calibration towards what the rounds cost, far enough to decide.
    assert 3 * prior < learned < STEP * (2.0 + used[-1])


def test_predictions_are_checked_against_the_measured_round_time() -> None:
    policy = AdaptiveDraftLength(CostModel(TAU, 0.0), step_s=STEP)
    option = lookup(8, 8)
    for _ in range(5):
        choice = policy.choose([option])
        assert choice is not None
        # Each round takes twice its prediction (the engine measures it).
        seconds = 2 * policy.costs.round_s(DraftKind.LOOKUP, choice.k)
        policy.observe(
            choice,
            RoundEvent(
                drafter="suffix",
                k=choice.k,
                drafted=choice.k,
                accepted=choice.k,
                draft_s=0,
                verify_s=0,
            ),
            seconds,
        )
    errors = policy.costs.accuracy.median()
    assert set(errors) == {"suffix"} and errors["suffix"] == pytest.approx(0.5)
    assert len(policy.costs.accuracy.errors["suffix"]) == 5


def test_a_draft_model_far_behind_pays_its_prefill_first() -> None:
    # After a long stretch of n-gram rounds the draft model must read the whole context before
    # it can draft: that prefill is part of the round it would draft (the prose prompt).
    drafter = ModelDrafter(FakeModel())
    policy = AdaptiveDraftLength(
        CostModel(TAU, 0.1), step_s=STEP, draft_tau={1: 1.0, 2: 1.5, 64: 12.0}
    )
    caught_up = model(drafter, 16, behind=1)
    chosen = policy.choose([caught_up])
    assert chosen is not None and chosen.proposal is caught_up
    far_behind = model(drafter, 16, behind=600)
    prefill = policy.costs.prefill_s(DraftKind.MODEL, 600)
    assert prefill == pytest.approx(592 * 0.1 * STEP * 12 / 64)
    assert not drafts(policy.choose([far_behind]))


def test_a_prompt_the_draft_model_has_not_read_is_paid_over_the_answer_not_one_round() -> None:
    # A new prompt: the draft must read all of it before its first draft. Where the model pays
    # (a draft step a fifth of a target step, flat verification) that prefill is paid once for
    # every round after it, so auto drafts with the model from the first round of an answer;
    # priced whole in that first round, it never did (rounds were plain, and the draft fell
    # further behind). With only a few tokens left, the same prefill is not worth it.
    draft_tau = {1: 1.0, 2: 1.1, 4: 1.3, 32: 3.0}
    policy = AdaptiveDraftLength(CostModel(TAU, 0.18), step_s=STEP, draft_tau=draft_tau)
    answer = model(ModelDrafter(FakeModel()), 500, behind=120)
    chosen = policy.choose([answer])
    assert chosen is not None and chosen.proposal is answer and chosen.k >= 2
    later = AdaptiveDraftLength(policy.costs)  # another answer's, on the costs learned
    assert not drafts(later.choose([replace(answer, available=3)]))


def test_a_sure_draft_is_not_stopped_where_only_its_second_token_is_costly_to_verify() -> None:
    # Verification measured with the F16 target on a 2-core CPU: 2 tokens cost 1.5 steps, 8
    # only 2.1. Weighing the next token alone (0.5 steps more to verify) stopped every draft at
    # its first token; over every length the round is faster drafting on while the draft is
    # sure, and it still stops where a token is unlikely.
    tau = {1: 1.0, 2: 1.5, 3: 1.76, 4: 1.62, 5: 1.77, 6: 1.72, 7: 2.16, 8: 2.12, 9: 2.04}
    tau |= {10: 2.06, 11: 2.16, 12: 2.42, 16: 2.45, 17: 3.0}
    policy = AdaptiveDraftLength(CostModel(tau, 0.2), step_s=STEP, draft_tau={1: 1.0})
    policy.state.alpha[Bucket.MODEL] = 0.98  # what the target accepted of it so far
    choice = policy.choose([model(ModelDrafter(FakeModel()), 16, behind=1)])
    assert choice is not None and choice.k >= 4 and choice.stop is not None
    sure = [0.97**i for i in range(1, choice.k + 1)]
    # It drafts on through every size verified at about the cost of 8 (16 costs 2.45 steps,
    # 17 costs 3.0: there the 16th token, accepted at 0.61, is not worth it).
    assert not any(choice.stop(i, sure[: i + 1]) for i in range(15))
    assert choice.stop(0, [0.02])


def test_a_round_that_read_a_prefill_first_does_not_teach_the_draft_step() -> None:
    costs = LearnedCosts(CostModel(TAU, 0.2), STEP, {1: 1.0, 2: 1.8, 32: 12.0})
    drafts = DraftKind.MODEL
    before = (costs.draft_s(drafts, 1), costs.draft_s(drafts, 5))
    # Its prefill took twice its estimate: the rest is not five draft steps.
    prefill = costs.prefill_s(drafts, 50)
    costs.observe(
        RoundEvent(
            drafter="model", k=5, drafted=5, accepted=5, draft_s=2 * prefill + 0.01, verify_s=STEP
        ),
        drafts,
        None,
        50,
    )
    assert (costs.draft_s(drafts, 1), costs.draft_s(drafts, 5)) == before
    costs.observe(
        RoundEvent(drafter="model", k=5, drafted=5, accepted=5, draft_s=0.5, verify_s=STEP),
        drafts,
        None,
        2,
    )  # a catch-up
    assert costs.draft_s(drafts, 5) > before[1]


def test_sampled_drafts_accepted_far_more_often_than_their_top_probability_says() -> None:
    # At temperature > 0 a draft token is accepted with min(1, p/q): tokens whose draft
    # probability was 0.3 accepted 9 times in 10.
    judge = ConfidencePower()
    for i in range(200):
        judge.judge([0.3], accepted=int(i % 10 != 0))
    assert judge.gamma <= 0.3 and 0.3**judge.gamma > 0.6


def test_a_miss_right_after_the_draft_read_new_context_does_not_end_model_drafting() -> None:
    # Measured on the F16 target here: where the model pays by a thin margin, one missed first
    # token of an answer (the draft had just read the prompt) learned as a miss made the model
    # look slower than plain decoding for the rest of the answer.
    tau = {1: 1.0, 2: 1.68, 3: 1.73, 4: 1.88, 5: 1.94, 6: 2.02, 7: 2.59, 8: 2.7, 16: 4.2}
    drafter = ModelDrafter(FakeModel())
    policy = AdaptiveDraftLength(
        CostModel(tau, 0.25), step_s=0.091, draft_tau={1: 1.0, 2: 1.88, 32: 12.9}
    )
    first = policy.choose([model(drafter, 200, behind=40)])
    assert first is not None and first.k > 0
    missed = RoundEvent(
        drafter="model", k=first.k, drafted=first.k, accepted=0, draft_s=0.3, verify_s=0.2
    )  # its first token missed
    policy.observe(first, missed, 0.5)
    assert policy.state.alpha[Bucket.MODEL] == policy.config.prior_model
    after = policy.choose([model(drafter, 199, behind=1)])
    assert after is not None and after.k > 0
    # A miss once the draft has followed the answer counts as ever.
    before = policy.state.alpha[Bucket.MODEL]
    policy.observe(
        after,
        RoundEvent(
            drafter="model", k=after.k, drafted=after.k, accepted=0, draft_s=0.1, verify_s=0.2
        ),
        0.3,
    )
    assert policy.state.alpha[Bucket.MODEL] < before
