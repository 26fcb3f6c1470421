"""The draft model's confidence, calibrated by what the target accepts."""

from __future__ import annotations

from edgespec.planner.confidence import MIN_JUDGED, ConfidencePower


def test_the_draft_models_confidence_is_calibrated_by_what_the_target_accepts() -> None:
    # Tokens the draft was only half sure of, accepted 4 times in 5: its word undersells them.
    under = ConfidencePower()
    for i in range(40):
        under.judge([0.5], accepted=int(i % 5 != 0))
        if i < MIN_JUDGED - 1:
            assert under.gamma == 1.0  # too few judged to doubt the draft's word
    assert under.gamma < 1.0
    # Accepted as often as the draft said: its word stands. Over-sure: it is discounted.
    fair, over = ConfidencePower(), ConfidencePower()
    for i in range(100):
        fair.judge([0.6], accepted=int(i % 5 < 3))
        over.judge([0.9], accepted=int(i % 2 == 0))
    assert fair.gamma == 1.0 and over.gamma > 1.0
