"""The cost model: which draft length K pays for a measured verification curve, as the plan
asks it before loading (costs in target steps, nothing learned yet)."""

from __future__ import annotations

import pytest

from edgespec.auto.costs import LearnedCosts
from edgespec.auto.prior import CostModel, expected_tokens
from edgespec.engine.drafters import DraftKind
from edgespec.planner.calibrate import Calibration
from tests.machines import CPU_TAU, GPU_TAU


def in_steps(tau: dict[int, float], c: float) -> LearnedCosts:
    """The costs as the plan weighs them: in target steps, from the calibration alone."""
    return LearnedCosts(CostModel(tau, c), 1.0)


def brute_force(tau: dict[int, float], c: float, alpha: float, k_max: int) -> tuple[int, float]:
    """A draft model's round of K: its catch-up (two tokens read, one step each where no batch
    was measured), K draft steps and the verification of K + 1 tokens."""
    model = CostModel(tau, c)
    measured = [0, *(n - 1 for n in tau if 2 <= n <= k_max + 1)]
    cost = {k: (c * (2 + k) if k else 0.0) + model.tau(k + 1) for k in measured}
    speeds = {k: expected_tokens(alpha, k) / cost[k] for k in measured}
    best = max(speeds, key=lambda k: (speeds[k], -k))
    return best, speeds[best]


@pytest.mark.parametrize("tau", [CPU_TAU, GPU_TAU], ids=["cpu", "gpu"])
@pytest.mark.parametrize("c", [0.0, 0.1, 0.6])
@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.9, 0.95, 0.99])
def test_best_k_matches_brute_force(tau: dict[int, float], c: float, alpha: float) -> None:
    k, s = in_steps(tau, c).best_k(DraftKind.MODEL, alpha, 31)
    bk, bs = brute_force(tau, c, alpha, 31)
    assert s == pytest.approx(bs) and k == bk


def test_no_speculation_when_acceptance_is_below_the_cost() -> None:
    cpu = in_steps(CPU_TAU, 0.58)
    # K = 1 pays only if alpha > 3c + tau(2) - 1: never for this draft model, and longer
    # drafts not even at near-perfect acceptance ...
    assert cpu.best_k(DraftKind.MODEL, 0.9, 31) == (0, 1.0)
    assert cpu.best_k(DraftKind.MODEL, 0.99, 31)[1] < 1.1
    # ... while free lookups pay once acceptance is high enough,
    assert cpu.best_k(DraftKind.LOOKUP, 0.5, 31)[0] == 0
    assert cpu.best_k(DraftKind.LOOKUP, 0.95, 31)[0] >= 8
    # and on a GPU-like curve the same draft model pays.
    assert in_steps(GPU_TAU, 0.1).best_k(DraftKind.MODEL, 0.8, 31)[0] >= 3


def test_k_is_chosen_where_tau_was_measured_and_dips_are_used() -> None:
    # Verifying 4 tokens is cheaper than 3 (a kernel shape): at high acceptance K = 3 is
    # better than K = 2, never K = 4 or 5, which were not measured.
    model = CostModel({1: 1.0, 2: 1.6, 3: 2.0, 4: 1.5, 6: 4.0}, 0.0)
    assert model.choices(8) == [1, 2, 3, 5]
    assert LearnedCosts(model, 1.0).best_k(DraftKind.LOOKUP, 0.9, 8)[0] == 3
    cal = Calibration(0.04, {1: 1.0, 2: 1.6, 3: 2.0, 4: 1.5, 5: 2.6}, noise=0.05)
    assert cal.dips() == [4]
    assert Calibration(0.04, {1: 1.0, 2: 1.6, 3: 1.55}, noise=0.05).dips() == []  # noise


def test_interpolation_and_extrapolation() -> None:
    model = CostModel({1: 1.0, 4: 2.5, 8: 4.5}, 0.0)
    assert model.tau(2) == pytest.approx(1.5)
    assert model.tau(12) == pytest.approx(6.5)  # last slope carried on
    with pytest.raises(ValueError):
        CostModel({2: 1.5}, 0.0)
