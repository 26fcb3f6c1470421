"""The first run on a machine answers at once from costs guessed from the files, and measures
the device after the answer for the runs that follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.planner.calibrate import DRAFT_POINTS, TAU_CORE, prior
from edgespec.planner.choice import ModelWhy
from edgespec.planner.decide import choose_drafters
from edgespec.planner.resources import Fit
from tests.conftest import RealPair, edgespec

GB = 1_000_000_000


def test_guessed_costs_scale_with_the_bytes_a_step_reads() -> None:
    q4 = prior(int(1.12 * GB), int(0.49 * GB))
    f16 = prior(int(3.56 * GB), int(0.49 * GB))
    assert not q4.measured and not f16.measured
    assert q4.c == pytest.approx(0.49 / 1.12) and f16.c == pytest.approx(0.49 / 3.56)
    assert f16.target_step_s == pytest.approx(q4.target_step_s * 3.56 / 1.12)
    assert set(q4.tau) == set(TAU_CORE) and set(q4.draft_tau) == set(DRAFT_POINTS)
    assert all(a < b for a, b in zip(q4.tau.values(), list(q4.tau.values())[1:], strict=False))
    assert prior(GB, None).draft_step_s is None
    # A draft a seventh of the target's bytes is worth loading on the guess, and the plan says
    # the costs are guessed.
    choice = choose_drafters(f16, Fit.BOTH)
    assert choice.use_model and choice.why is ModelWhy.PAYS and not choice.measured


@pytest.mark.real
def test_the_first_run_answers_before_measuring_and_the_next_one_uses_the_cache(
    real_pair: RealPair, isolated: dict[str, str]
) -> None:
    args = ("--target", str(real_pair.target), "--draft", str(real_pair.draft))
    first = edgespec("run", "Say hello.", "--max-tokens", "8", "--stats", *args, env=isolated)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip()
    assert "guessed from the files" in first.stderr
    # The answer and its stats come first, the measurement after them.
    assert first.stderr.index("drafter auto") < first.stderr.index("measuring this device")
    cached = list((Path(isolated["EDGESPEC_HOME"]) / "calibration").glob("*.json"))
    assert len(cached) == 1
    second = edgespec("run", "Say hello.", "--max-tokens", "8", "--stats", *args, env=isolated)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout  # greedy, whatever the costs auto ran on
    assert "calibration cached" in second.stderr and "measuring" not in second.stderr
