"""The planner: choosing K from the cost model, adapting to acceptance, memory decisions and
the calibration cache."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgespec import settings
from edgespec.engine.drafters import Drafter, EitherDrafter, ModelDrafter, NgramDrafter, Option
from edgespec.engine.events import RoundEvent
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.verify import EMPTY_DRAFT, Draft
from edgespec.errors import ConfigError
from edgespec.models.gguf import read_gguf
from edgespec.options import K_MAX
from edgespec.planner import calibrate as cal_store
from edgespec.planner.adaptive import AdaptiveDraftLength, bucket
from edgespec.planner.calibrate import Calibration, calibrate
from edgespec.planner.confidence import MIN_JUDGED, ConfidencePower
from edgespec.planner.costs import CostModel, expected_tokens
from edgespec.planner.hardware import Hardware
from edgespec.planner.memory import MemoryPlan, ModelMemory, model_memory
from edgespec.planner.plan import DecodeOptions, choose_drafters, choose_resources, decide
from edgespec.rpc import PROTOCOL, Endpoint, ServerInfo
from tests.fakes import FakeModel
from tests.gguf_files import write_vocab_gguf

# tau(n) as measured on this 2-core CPU (Qwen2.5-Coder 1.5B) and a flat GPU-like curve.
CPU_TAU = {
    1: 1.0,
    2: 1.71,
    3: 2.11,
    4: 2.57,
    5: 3.23,
    6: 3.78,
    7: 4.26,
    8: 4.52,
    12: 5.57,
    16: 5.29,
    24: 8.19,
    32: 9.9,
}
# A flat GPU-like curve, measured where calibration measures: every n to 17, then every 4th.
GPU_TAU = {n: 1.0 + 0.02 * (n - 1) for n in (*range(1, 18), 20, 24, 28, 32)}


def brute_force(tau: dict[int, float], c: float, alpha: float, k_max: int) -> tuple[int, float]:
    model = CostModel(tau, c)
    measured = [0, *(n - 1 for n in tau if 2 <= n <= k_max + 1)]
    speeds = {k: expected_tokens(alpha, k) / (k * c + model.tau(k + 1)) for k in measured}
    best = max(speeds, key=lambda k: (speeds[k], -k))
    return best, speeds[best]


@pytest.mark.parametrize("tau", [CPU_TAU, GPU_TAU], ids=["cpu", "gpu"])
@pytest.mark.parametrize("c", [0.0, 0.1, 0.6])
@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.9, 0.95, 0.99])
def test_best_k_matches_brute_force(tau: dict[int, float], c: float, alpha: float) -> None:
    k, s = CostModel(tau, c).best_k(alpha, 31)
    bk, bs = brute_force(tau, c, alpha, 31)
    assert s == pytest.approx(bs) and k == bk


def test_no_speculation_when_acceptance_is_below_the_cost() -> None:
    cpu = CostModel(CPU_TAU, 0.58)
    # K = 1 pays only if alpha > c + tau(2) - 1 = 1.29: never for this draft model, and longer
    # drafts only at near-perfect acceptance ...
    assert cpu.best_k(0.9, 31) == (0, 1.0)
    assert cpu.best_k(0.99, 31)[1] < 1.1
    # ... while free n-gram drafts pay once acceptance is high enough,
    assert cpu.best_k(0.5, 31, c=0.0)[0] == 0
    assert cpu.best_k(0.95, 31, c=0.0)[0] >= 8
    # and on a GPU-like curve the same draft model pays.
    assert CostModel(GPU_TAU, 0.1).best_k(0.8, 31)[0] >= 3


def test_k_is_chosen_where_tau_was_measured_and_dips_are_used() -> None:
    # Verifying 4 tokens is cheaper than 3 (a kernel shape): at high acceptance K = 3 is
    # better than K = 2, never K = 4 or 5, which were not measured.
    model = CostModel({1: 1.0, 2: 1.6, 3: 2.0, 4: 1.5, 6: 4.0}, 0.0)
    assert model.choices(8) == [1, 2, 3, 5]
    assert model.best_k(0.9, 8)[0] == 3
    cal = Calibration(0.04, {1: 1.0, 2: 1.6, 3: 2.0, 4: 1.5, 5: 2.6}, noise=0.05)
    assert cal.dips() == [4]
    assert Calibration(0.04, {1: 1.0, 2: 1.6, 3: 1.55}, noise=0.05).dips() == []  # noise


def test_interpolation_and_extrapolation() -> None:
    model = CostModel({1: 1.0, 4: 2.5, 8: 4.5}, 0.0)
    assert model.tau(2) == pytest.approx(1.5)
    assert model.tau(12) == pytest.approx(6.5)  # last slope carried on
    with pytest.raises(ValueError):
        CostModel({2: 1.5}, 0.0)


class AlwaysMatch(NgramDrafter):
    """A lookup that always finds a long match, so only the adaptive logic is under test."""

    def options(self, tokens, room):  # type: ignore[no-untyped-def]
        return [Option(self, "ngram", room, True, 4)]

    def propose(self, tokens, k, sampler):  # type: ignore[no-untyped-def]
        return Draft([5] * k, None, "ngram")


def one_round(
    policy: AdaptiveDraftLength, drafter: Drafter, tokens: list[int], room: int = 32
) -> Draft:
    """What the engine does to choose and draft a round."""
    option, k = policy.choose(drafter.options(tokens, room))
    if option is None or k == 0:
        return EMPTY_DRAFT
    return option.drafter.propose(tokens, k, Sampler(SamplingParams()))


def run_rounds(
    policy: AdaptiveDraftLength, drafter: Drafter, accept: bool, rounds: int = 40
) -> list[int]:
    """Each round accepts the whole draft (accept=True) or rejects its first token."""
    tokens = [1, 2, 3]
    drafter.begin(tokens)
    ks = []
    for _ in range(rounds):
        draft = one_round(policy, drafter, tokens)
        ks.append(len(draft.tokens))
        new = [*draft.tokens, 5] if accept else [6]
        drafter.commit([*tokens, *new])
        accepted = len(draft.tokens) if accept else 0
        policy.observe(RoundEvent(draft.source, len(draft), len(draft), accepted, 0.0, 0.0))
        tokens = [*tokens, *new]
    return ks


# Measured on the 2-core EPYC of 2026-11-30 (target step 40.6 ms): verification is steep.
STEEP_TAU = {
    **{1: 1.0, 2: 1.94, 3: 2.74, 4: 3.36, 5: 4.11, 6: 4.85, 7: 5.72, 8: 7.97, 9: 8.7, 10: 9.0},
    **{11: 9.62, 12: 9.93, 13: 10.79, 14: 11.17, 15: 11.87, 16: 10.53, 17: 12.81, 20: 14.43},
    **{24: 16.29, 28: 18.35, 32: 19.07},
}


def test_a_copy_match_is_drafted_where_verification_is_steep() -> None:
    """An 8-token match (text being copied) starts from a high acceptance rate, so a steep
    device still tries it; a 4-token match does not pay there; a copy that misses stops."""
    policy = AdaptiveDraftLength(CostModel(STEEP_TAU, 0.0))
    copy = Option(NgramDrafter(), "ngram", 32, True, match=8)
    assert bucket(copy) == "ngram-copy"
    option, k = policy.choose([copy])
    assert option is copy and k >= 1
    assert policy.choose([Option(NgramDrafter(), "ngram", 32, True, match=4)]) == (None, 0)
    for _ in range(3):
        policy.choose([copy])
        policy.observe(RoundEvent("ngram", k, k, 1, 0.0, 0.0))
    assert policy.choose([copy]) == (None, 0)


def test_a_lookup_that_takes_up_a_copy_again_is_priced_near_a_copy() -> None:
    """A 4-token match that resumes the source a copy left (an edit made) is drafted where
    verification is steep; the same match without a copy behind it is not."""
    policy = AdaptiveDraftLength(CostModel(STEEP_TAU, 0.0))
    resumed = Option(NgramDrafter(), "ngram", 32, True, match=4, resumed=True)
    assert bucket(resumed) == "ngram-resume"
    option, k = policy.choose([resumed])
    assert option is resumed and k >= 1
    assert policy.choose([replace(resumed, resumed=False)]) == (None, 0)


def test_rounds_that_draft_nothing_still_teach_whether_the_lookup_was_right() -> None:
    """After a copy missed, nothing pays on a steep device; the target's own tokens then show
    whether the lookup's first token would have been accepted: right, and the copy is drafted
    again within a few rounds; wrong, or not told, and it is not (until a probe)."""

    def rounds_until_drafting(target_token: int | None) -> int | None:
        policy = AdaptiveDraftLength(CostModel(STEEP_TAU, 0.0))
        copy = Option(NgramDrafter(), "ngram", 32, True, match=8, next=42)
        _, k = policy.choose([copy])
        policy.observe(RoundEvent("ngram", k, k, 0, 0.0, 0.0, target_token=7))  # a miss
        for i in range(20):
            option, k = policy.choose([copy])
            if option is not None:
                return i
            policy.observe(RoundEvent("none", 0, 0, 0, 0.0, 0.0, target_token=target_token))
        return None

    resumed = rounds_until_drafting(42)
    assert resumed is not None and resumed <= 10
    assert rounds_until_drafting(7) is None
    assert rounds_until_drafting(None) is None


def test_adaptive_k_grows_with_acceptance_and_shrinks_with_rejections() -> None:
    policy, drafter = AdaptiveDraftLength(CostModel(CPU_TAU, 0.0)), AlwaysMatch()
    ks_good = run_rounds(policy, drafter, accept=True)
    assert ks_good[0] < ks_good[-1] and ks_good[-1] >= 8
    alpha_high = policy.state.alpha["ngram-long"]
    ks_bad = run_rounds(policy, drafter, accept=False, rounds=200)
    alpha_low = policy.state.alpha["ngram-long"]
    assert alpha_low < alpha_high and policy.costs.best_k("ngram", alpha_low, 32)[0] == 0
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
    cpu = AdaptiveDraftLength(CostModel(CPU_TAU, 0.58), cpu_model)
    either = EitherDrafter(NgramDrafter(), cpu_model)
    either.begin(text)
    assert one_round(cpu, either, text, room=8).tokens == []
    gpu_model = ModelDrafter(FakeModel(seed=1))
    gpu = AdaptiveDraftLength(CostModel(GPU_TAU, 0.1), gpu_model)
    either = EitherDrafter(NgramDrafter(), gpu_model)
    either.begin(text)
    draft = one_round(gpu, either, text, room=8)
    assert 1 <= len(draft.tokens) <= 8 and draft.source == "model"


def test_a_costly_catch_up_does_not_stop_a_sure_model_draft_at_its_first_token() -> None:
    # The draft reads two tokens after each round at 4 draft steps' cost (1.2 target steps):
    # paid before the first token is drafted, so it must not count against that token.
    model = ModelDrafter(FakeModel(seed=1))
    policy = AdaptiveDraftLength(CostModel(GPU_TAU, 0.3), model, draft_tau={1: 1.0, 2: 4.0})
    assert model.stop_rule is not None
    assert not model.stop_rule(0, 0.95) and not model.stop_rule(3, 0.9)
    assert model.stop_rule(0, 0.05)  # an unlikely token is still not worth a step
    assert policy.costs.round_s("model", 1) > policy.costs.plain_s * 2  # the catch-up counts


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


def test_a_draft_that_undersells_itself_drafts_further_once_that_is_learned() -> None:
    model = ModelDrafter(FakeModel(seed=1))
    policy = AdaptiveDraftLength(CostModel(GPU_TAU, 0.3), model)
    stop = model.stop_rule
    assert stop is not None
    for _ in range(20):  # drafts of two tokens, each at 0.5, both accepted every time
        option, _k = policy.choose([Option(model, "model", 8, False)])
        assert option is not None and option.source == "model"
        for drafted, cumulative in enumerate((0.5, 0.25, 0.125)):  # the third is stopped
            stop(drafted, cumulative)
        policy.observe(RoundEvent("model", 8, 2, 2, 0.0, 0.0))
    assert policy.state.confidence.gamma < 1.0

    def least_sure_third_token() -> float:
        assert stop is not None
        return next(c / 100 for c in range(1, 101) if not stop(2, c / 100))

    learned = least_sure_third_token()
    policy.state.confidence = ConfidencePower()  # the draft's word again, all else the same
    assert learned < least_sure_third_token()


def test_a_model_probe_runs_only_where_reading_the_missed_context_is_cheap() -> None:
    """A probe of the draft model first reads every token it missed: on a device where its
    batches are nearly free that is worth a probe every PROBE_AFTER rounds, and the probe drafts
    its token however unsure the draft is; where each token read costs a third of a step it is
    never worth one."""

    def probes(tau: dict[int, float], c: float, draft_tau: dict[int, float]) -> list[int]:
        model = ModelDrafter(FakeModel(seed=1), p_min=0.0)
        policy = AdaptiveDraftLength(CostModel(tau, c), model, draft_tau=draft_tau)
        policy.state.alpha["model"] = 0.05  # it does not pay: only probes draft
        chosen = []
        for i in range(100):  # the draft falls one token further behind every round
            option, k = policy.choose([Option(model, "model", 8, False, behind=i + 3)])
            if option is not None:
                chosen.append(i)
                assert k == 1 and model.stop_rule is not None and not model.stop_rule(0, 0.01)
            policy.observe(RoundEvent("none", 0, 0, 0, 0.0, 0.0))
        return chosen

    flat = {n: 1.0 + 0.02 * (n - 1) for n in (1, 2, 4, 8, 32, 128)}
    assert len(probes(GPU_TAU, 0.3, flat)) >= 2
    cpu_draft = {1: 1.0, 2: 1.87, 4: 2.75, 32: 15.6, 128: 62.0}  # this project's EPYC
    assert probes(STEEP_TAU, 0.68, cpu_draft) == []


def hardware(available: int, gpu: bool = False) -> Hardware:
    return Hardware(
        available * 2, available, 4, 8, gpu, "cuda" if gpu else "cpu", None, "Linux x86_64"
    )


@pytest.fixture
def infos(tmp_path: Path):  # type: ignore[no-untyped-def]
    tokens = [f"t{i}".encode() for i in range(1000)]
    target = write_vocab_gguf(tmp_path / "t.gguf", tokens)
    draft = write_vocab_gguf(tmp_path / "d.gguf", tokens)
    t, d = read_gguf(target), read_gguf(draft)
    t.metadata.update(
        {
            "llama.block_count": 28,
            "llama.embedding_length": 1536,
            "llama.attention.head_count": 12,
            "llama.attention.head_count_kv": 2,
            "llama.context_length": 32768,
        }
    )
    d.metadata.update(
        {
            "llama.block_count": 24,
            "llama.embedding_length": 896,
            "llama.attention.head_count": 14,
            "llama.attention.head_count_kv": 2,
            "llama.context_length": 32768,
        }
    )
    return t, d


def test_memory_decisions(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    both = choose_resources(hardware(8_000_000_000), t, d)
    assert both.fit == "both" and both.n_ctx == 4096
    # KV cache of the 1.5B geometry at 4096 tokens: 28 layers x 4096 x 2 heads x 256 x 2 bytes.
    assert both.memory.target.kv_cache == 28 * 4096 * 2 * 256 * 2
    need_target = both.memory.target_only
    tight = choose_resources(hardware(int((need_target + 1000) / 0.9)), t, d)
    assert tight.fit == "target"
    kv = both.memory.target.kv_cache
    shrunk = choose_resources(hardware(int((need_target - kv // 2) / 0.9)), t, d)
    assert shrunk.n_ctx < 4096  # no size asked for: the context shrinks to fit
    with pytest.raises(ConfigError, match=r"GB missing"):
        choose_resources(hardware(1_000_000), t, d, n_ctx=4096)
    with pytest.raises(ConfigError, match="training context of 32768"):
        choose_resources(hardware(8_000_000_000), t, d, n_ctx=65536)


def test_memory_plan_message_names_the_numbers() -> None:
    m = ModelMemory("x.gguf", 2_000_000_000, 100_000_000, 50_000_000)
    with pytest.raises(ConfigError) as exc:
        _ = MemoryPlan(m, None, 1_000_000_000).decision
    assert "needs 2.19 GB" in str(exc.value) and "0.90 GB can be used" in str(exc.value)
    assert "1.29 GB missing" in str(exc.value)


class _Clock:
    """A clock that only the fake models below move: timings without timing noise."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _TimedModel(FakeModel):
    """Decoding n tokens takes step x tau(n) on `clock`."""

    def __init__(self, clock: _Clock, step: float, tau: Callable[[int], float]) -> None:
        super().__init__(n_ctx=1024)
        self.clock, self.step, self.cost = clock, step, tau
        self.sizes: list[int] = []

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.clock.now += self.step * self.cost(len(tokens))
        self.sizes.append(len(tokens))
        return super().decode(tokens, n_logits)


@pytest.mark.parametrize(
    ("tau", "measured", "passes"),
    [
        # Verification as steep as this 2-core CPU's: the lengths in between are not worth
        # their time, two passes over the core lengths exceed the budget already.
        (lambda n: 1.0 + 0.6 * (n - 1), set(cal_store.TAU_CORE), 2),
        # Flat, as on a GPU: every length, as many passes as allowed.
        (lambda n: 1.0 + 0.02 * (n - 1), set(cal_store.TAU_POINTS), cal_store.MAX_PASSES),
    ],
)
def test_calibration_measures_what_the_budget_affords(
    monkeypatch: pytest.MonkeyPatch,
    tau: Callable[[int], float],
    measured: set[int],
    passes: int,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(cal_store, "perf_counter", clock)
    target = _TimedModel(clock, 0.04, tau)
    result = calibrate(target, None, list(range(10)) * 30, max_n=32)
    assert set(result.tau) == measured and result.passes == passes
    for n, v in result.tau.items():  # what the clock saw, exactly
        assert v == pytest.approx(tau(n))
    assert result.target_step_s == pytest.approx(0.04) and result.noise == pytest.approx(
        0, abs=1e-9
    )
    # Every length measured once per pass, in alternating order (drift hits all alike).
    assert target.sizes[0] == cal_store.CONTEXT_TOKENS  # the context, read once
    batches = target.sizes[1:]
    assert batches[:4] == [1, 1, 1, 32]  # the warm-up steps, then the largest batch once
    sweep = sorted(measured)
    assert batches[4:] == [*sweep, *sweep[::-1]] * (passes // 2) + sweep * (passes % 2)


def test_affordable_estimates_a_pass_on_a_line() -> None:
    sizes, core = [1, 2, 4, 8], [1, 2]
    # A line from 1 to 8 at n = 8: 1 + 2 + 4 + 8 = 15 steps a pass.
    assert cal_store.affordable(sizes, core, 8.0, budget_steps=30, passes=2) == sizes
    assert cal_store.affordable(sizes, core, 8.0, budget_steps=29, passes=2) == core


def test_calibration_measures_and_caches(tmp_path: Path) -> None:
    target, draft = FakeModel(n_ctx=1024), FakeModel(n_ctx=1024, seed=3)
    result = calibrate(target, draft, list(range(10)) * 10, max_n=8, passes=(2, 3))
    assert set(result.tau) == {1, 2, 3, 4, 5, 6, 7, 8} and result.tau[1] == 1.0
    assert result.c is not None and result.c > 0
    assert set(result.draft_tau) == {1, 2, 4, 32} and result.draft_tau[1] == 1.0
    assert 2 <= result.passes <= 3 and result.noise is not None and result.noise >= 0
    assert target.n_past == 0 and draft.n_past == 0  # caches left empty
    key = cal_store.cache_key(target="a" * 64, threads=2)
    cal_store.save(tmp_path, key, result)
    again = cal_store.load_cached(tmp_path, key)
    assert again == result
    # Another model or other settings: another key, nothing cached.
    assert cal_store.load_cached(tmp_path, cal_store.cache_key(target="b" * 64, threads=2)) is None
    assert cal_store.load_cached(tmp_path, cal_store.cache_key(target="a" * 64, threads=4)) is None
    # A corrupt file is ignored (and then rebuilt by the caller).
    (tmp_path / f"{key}.json").write_text("{not json")
    assert cal_store.load_cached(tmp_path, key) is None
    (tmp_path / f"{key}.json").write_text(json.dumps({"tau": {"2": 1.5}, "target_step_s": 0.02}))
    assert cal_store.load_cached(tmp_path, key) is None


def test_model_drafter_chosen_by_calibration() -> None:
    cpu = Calibration(0.025, CPU_TAU, 0.0145)
    gpu = Calibration(0.010, GPU_TAU, 0.001)
    assert not choose_drafters(cpu, "both").use_model
    assert "cannot beat plain decoding" in choose_drafters(cpu, "both").reason
    assert choose_drafters(gpu, "both").use_model
    assert not choose_drafters(gpu, "target").use_model


def test_plan_says_whether_tree_drafts_pay() -> None:
    """Trees where verifying more tokens costs little (a GPU, the Intel machine's kernel
    shapes), chains where every extra token costs nearly a step (the CPU measured here)."""
    steep = Calibration(0.025, {n: float(n) for n in GPU_TAU}, 0.0145)
    assert "tree drafts (other continuations verified in the same pass) do not pay here" in (
        choose_drafters(steep, "both").reason
    )
    gpu = choose_drafters(Calibration(0.010, GPU_TAU, 0.003), "both").reason
    assert "tree drafts pay here" in gpu
    assert "its second choices are verified beside the chain where it is unsure (3 leaves" in gpu
    # A draft model that pays on a device where every token verified costs 0.6 steps more:
    # its leaves do not.
    steep_ish = Calibration(0.025, {n: 0.4 + 0.6 * n for n in GPU_TAU}, 0.002)
    reason = choose_drafters(steep_ish, "both")
    assert reason.use_model and "its second choices (tree leaves" in reason.reason


@pytest.mark.real
def test_plan_json_is_complete_and_calibration_is_reused(real_pair, isolated) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import edgespec

    args = ("plan", "--target", str(real_pair.target), "--draft", str(real_pair.draft), "--json")
    first = edgespec(*args, env=isolated)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert set(doc) >= {"hardware", "memory", "settings", "calibration", "decision", "models"}
    assert doc["hardware"]["physical_cores"] >= 1 and doc["hardware"]["available_ram"] > 0
    mem = doc["memory"]
    assert mem["fit"] in ("both", "target")
    for part in ("weights", "kv_cache", "compute", "total"):
        assert mem["target"][part] > 0 and mem["draft"][part] > 0
    assert mem["target"]["weights"] == 1111370240  # tensor bytes of the 1.5B Q4_K_M file
    cal = doc["calibration"]
    assert not cal["cached"] and cal["seconds"] > 0
    assert cal["tau"]["1"] == 1.0 and cal["tau"]["2"] > 1.0 and cal["c"] > 0
    assert doc["decision"]["reason"] and "ngram" in doc["decision"]["drafters"]
    # Why the draft model is or is not loaded, and the drafter and K every command would use.
    assert doc["draft_model"]["reason"] and doc["draft_model"]["loaded"] == (
        "model" in doc["decision"]["drafters"]
    )
    assert doc["drafter"]["name"] == "auto" and doc["drafter"]["k"] == 32
    assert "auto" in doc["drafter"]["allowed"]
    second = json.loads(edgespec(*args, env=isolated).stdout)
    assert second["calibration"]["cached"] and second["calibration"]["tau"] == cal["tau"]
    text = edgespec(
        "plan", "--target", str(real_pair.target), "--draft", str(real_pair.draft), env=isolated
    )
    # In a pipe the memory table is its header and rows, tab-separated (no drawn title).
    assert text.returncode == 0 and "decision" in text.stdout and "weights\t" in text.stdout
    # A corrupt cache is ignored and rebuilt.
    for f in (Path(isolated["EDGESPEC_HOME"]) / "calibration").glob("*.json"):
        f.write_text("garbage")
    third = json.loads(edgespec(*args, env=isolated).stdout)
    assert not third["calibration"]["cached"]


@pytest.mark.real
def test_ctx_size_beyond_training_is_refused(real_pair, isolated) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import edgespec

    res = edgespec(
        "run", "hi", "--target", str(real_pair.target), "--ctx-size", "100000", env=isolated
    )
    assert res.returncode == 1 and "training context of 32768 tokens" in res.stderr


def test_decide_says_what_to_load_and_why(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    files = (Path("t.gguf"), Path("d.gguf"))
    roomy = choose_resources(hardware(8_000_000_000), t, d)
    cpu, gpu = Calibration(0.025, CPU_TAU, 0.0145), Calibration(0.010, GPU_TAU, 0.001)

    plan = decide(DecodeOptions(), *files, roomy, cpu)
    assert plan.draft is None and "cannot beat plain decoding" in plan.draft_reason
    assert plan.drafters == ("auto", "ngram", "none") and plan.k == K_MAX
    plan = decide(DecodeOptions(), *files, roomy, gpu)
    assert plan.draft == files[1] and plan.drafters[:3] == ("auto", "model", "hybrid")
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["draft_model"] == {"loaded": True, "reason": plan.draft_reason}
    assert doc["drafter"] == {"name": "auto", "k": K_MAX, "allowed": list(plan.drafters)}

    plan = decide(DecodeOptions(drafter="ngram"), files[0], None, roomy)
    assert plan.draft is None and plan.k == 8 and plan.drafters == ("ngram", "none")
    assert decide(DecodeOptions(drafter="model", k=3), *files, roomy).k == 3
    kept = decide(DecodeOptions(drafter="none", keep_draft=True), *files, roomy)
    assert kept.draft == files[1] and kept.draft_reason == "kept loaded on request"

    tight = choose_resources(hardware(int((roomy.memory.target_only + 1000) / 0.9)), t, d)
    plan = decide(DecodeOptions(), *files, tight, gpu)
    assert plan.draft is None and "does not fit" in plan.draft_reason
    with pytest.raises(ConfigError, match="does not fit next to the target"):
        decide(DecodeOptions(drafter="model"), *files, tight)
    with pytest.raises(ConfigError, match="unknown drafter 'fast'"):
        decide(DecodeOptions(drafter="fast"), *files, roomy)
    with pytest.raises(ConfigError, match="--draft-tokens must be >= 0"):
        decide(DecodeOptions(drafter="ngram", k=-2), *files, roomy)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # nested deeper than any parser allows
        '{"tau": {"1": 1.0, "2": NaN}, "target_step_s": 0.02}',
        '{"tau": {"1": 1.0, "2": -1.5}, "target_step_s": 0.02}',
        '{"tau": {"1": 1.0, "2": 1.5}, "target_step_s": 0.02, "draft_step_s": Infinity}',
        '{"tau": {"1": 1.0}, "target_step_s": -0.02}',
        '"just a string"',
    ],
)
def test_hostile_calibration_caches_are_ignored(tmp_path: Path, text: str) -> None:
    key = cal_store.cache_key(target="a" * 64)
    (tmp_path / f"{key}.json").write_text(text)
    assert cal_store.load_cached(tmp_path, key) is None


def test_an_unwritable_cache_warns_once_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    cal = Calibration(0.02, {1: 1.0, 2: 1.5})
    assert cal_store.save(blocked / "calibration", "k1", cal) is False
    assert cal_store.save(blocked / "calibration", "k2", cal) is False
    assert capsys.readouterr().err.count("cannot write the cache") == 1


SAVE_MANY = """
import sys
from pathlib import Path
from edgespec.planner import calibrate as store
from edgespec.planner.calibrate import Calibration
for i in range(150):
    assert store.save(Path(sys.argv[1]), "shared", Calibration(0.02, {1: 1.0, 2: 1.5 + i / 1000}))
"""


def test_two_processes_calibrating_at_once_leave_one_valid_file(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", SAVE_MANY, str(tmp_path)], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert cal_store.load_cached(tmp_path, "shared") is not None
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        "shared.json"
    ]


@pytest.mark.real
def test_the_calibration_key_names_the_machine(real_pair, isolated) -> None:  # type: ignore[no-untyped-def]
    from edgespec.planner.make import _calibration_key, _resources
    from edgespec.planner.plan import DecodeOptions

    resources = _resources(real_pair.target, None, DecodeOptions())
    here = _calibration_key(real_pair.target, None, resources)
    elsewhere = replace(resources, hardware=replace(resources.hardware, logical_cores=64))
    assert _calibration_key(real_pair.target, None, elsewhere) != here


def test_flash_attention_is_off_where_the_models_run_on_this_cpu(
    infos, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    cpu = choose_resources(hardware(8_000_000_000), t, d)
    gpu = choose_resources(hardware(8_000_000_000, gpu=True), t, d)
    on_gpu_layers = choose_resources(hardware(8_000_000_000, gpu=True), t, d, n_gpu_layers=0)
    assert cpu.flash_attn is False and on_gpu_layers.flash_attn is False
    # Layers asked for on a build that cannot offload still run on the CPU.
    assert choose_resources(hardware(8_000_000_000), t, d, n_gpu_layers=20).flash_attn is False
    assert gpu.flash_attn is None  # llama.cpp's own choice
    # Without it, a batch's attention scores take n_ubatch x n_ctx x n_head floats more.
    scores = 4 * 512 * 4096 * 12
    assert cpu.memory.target.compute - model_memory(t, 4096).compute == scores
    asked = choose_resources(hardware(8_000_000_000), t, d, flash_attn_asked=True)
    assert asked.flash_attn is True and asked.memory.target == model_memory(t, 4096)
    # EDGESPEC_FLASH_ATTN is what asks.
    monkeypatch.setenv("EDGESPEC_FLASH_ATTN", "0")
    assert settings.switch("EDGESPEC_FLASH_ATTN") is False
    monkeypatch.delenv("EDGESPEC_FLASH_ATTN")
    assert settings.switch("EDGESPEC_FLASH_ATTN") is None
    monkeypatch.setenv("EDGESPEC_FLASH_ATTN", "off")
    with pytest.raises(ConfigError, match="EDGESPEC_FLASH_ATTN must be 0 or 1, not 'off'"):
        settings.switch("EDGESPEC_FLASH_ATTN")


def test_rpc_servers_take_the_target_when_they_have_room(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    need = model_memory(t, 4096).total  # weights and KV cache, all on the servers
    pi = ServerInfo(Endpoint("pi", 1), PROTOCOL, ((need // 4, need),), 0.001)
    with pytest.raises(ConfigError, match=r"needs .* GB on the RPC servers .*\(pi:1 0\.\d\d GB"):
        choose_resources(hardware(8_000_000_000), t, d, servers=[pi, pi])
    mac = ServerInfo(Endpoint("mac", 2), PROTOCOL, ((3 * need, 4 * need),), 0.001)
    res = choose_resources(hardware(8_000_000_000), t, d, servers=[pi, mac])
    assert res.split == pytest.approx((1 / 13, 12 / 13))
    assert res.n_gpu_layers == -1 and res.draft_gpu_layers == 0
    # The draft computed here goes without flash attention; the servers' llama.cpp decides.
    assert res.flash_attn is False and res.target_flash_attn is None
    # Here only the target's compute buffers count; the draft stays here whole.
    assert res.memory.target.weights == 0 and res.memory.target.kv_cache == 0
    assert res.memory.draft is not None and res.memory.draft.kv_cache > 0
    # With a GPU here, the draft goes on it; the target's layers still go to the servers.
    gpu = choose_resources(hardware(8_000_000_000, gpu=True), t, d, servers=[mac])
    assert gpu.n_gpu_layers == -1 and gpu.draft_gpu_layers == -1
