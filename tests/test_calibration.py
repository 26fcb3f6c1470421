"""Calibration: measuring the verification curve within a budget, and its cache."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgespec.llamacpp.rpc_servers import PROTOCOL, Endpoint, ServerInfo
from edgespec.options import K_MAX, Drafting
from edgespec.planner import calibrate as cal_store
from edgespec.planner.calibrate import Calibration, calibrate
from edgespec.planner.decide import decide
from edgespec.planner.resources import choose_resources
from tests.fakes import Clock, FakeModel, FakeTextModel
from tests.machines import hardware


class _TimedModel(FakeModel):
    """Decoding n tokens takes step x tau(n) on `clock`, plus `first` the first time n tokens
    are decoded together (a GPU compiling or allocating for a new batch shape)."""

    def __init__(
        self,
        clock: Clock,
        step: float,
        tau: Callable[[int], float],
        first: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__(n_ctx=1024, seed=seed)
        self.clock, self.step, self.cost, self.first = clock, step, tau, first
        self.sizes: list[int] = []

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.clock.now += self.step * self.cost(len(tokens))
        if len(tokens) not in self.sizes:
            self.clock.now += self.first
        self.sizes.append(len(tokens))
        return super().decode(tokens, n_logits)


def _steep(n: int) -> float:
    return 1.0 + 0.6 * (n - 1)


def _flat(n: int) -> float:
    """tests/machines.py's GPU_TAU: tau(16) = 1.30."""
    return 1.0 + 0.02 * (n - 1)


@pytest.mark.parametrize(
    ("tau", "gpu", "measured", "passes"),
    [
        # Verification as steep as this 2-core CPU's: the lengths in between are not worth
        # their time; the pricing (39 steps) and warm-up (34) leave 77 of the 150: one pass
        # of 54 steps over the core lengths, a second would overrun it.
        (_steep, False, set(cal_store.TAU_CORE), 1),
        # The same on a GPU (few layers offloaded): its minimum, three passes.
        (_steep, True, set(cal_store.TAU_CORE), cal_store.GPU_MIN_PASSES),
        # Flat, as on a GPU: every length; the warm-up and pricing take 26 steps of the 150,
        # four passes of 25.7 steps fit in the rest, a fifth does not.
        (_flat, False, set(cal_store.TAU_POINTS), 4),
        (_flat, True, set(cal_store.TAU_POINTS), 4),
    ],
)
def test_calibration_measures_what_the_budget_affords(
    monkeypatch: pytest.MonkeyPatch,
    tau: Callable[[int], float],
    gpu: bool,
    measured: set[int],
    passes: int,
) -> None:
    clock = Clock()
    monkeypatch.setattr(cal_store, "perf_counter", clock)
    target = _TimedModel(clock, 0.04, tau)
    result = calibrate(target, None, list(range(10)) * 30, max_n=32, gpu=gpu)
    assert set(result.tau) == measured and result.passes == passes
    for n, v in result.tau.items():  # what the clock saw, exactly
        assert v == pytest.approx(tau(n))
    assert result.target_step_s == pytest.approx(0.04) and result.noise == pytest.approx(
        0, abs=1e-9
    )
    assert target.sizes[0] == cal_store.CONTEXT_TOKENS  # the context, read once
    batches = target.sizes[1:]
    # The step (its first run warms it up), the largest batch warmed and then timed to price
    # the others, every other length once, untimed; then every length once per pass, in
    # alternating order (drift hits all alike).
    assert batches[:5] == [1, 1, 1, 32, 32]
    sweep = sorted(measured)
    warm = [n for n in sweep if n not in (1, 32)]
    assert batches[5 : 5 + len(warm)] == warm
    timed = batches[5 + len(warm) :]
    assert timed == [*sweep, *sweep[::-1]] * (passes // 2) + sweep * (passes % 2)


def test_one_pass_takes_its_spread_from_the_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU that stops at one pass still says how far apart two runs of a size came out: its
    warm-up and its pass (here 10 ms apart: a first use that costs more)."""
    clock = Clock()
    monkeypatch.setattr(cal_store, "perf_counter", clock)
    target = _TimedModel(clock, 0.04, _steep, first=0.010)
    result = calibrate(target, None, list(range(10)) * 30, max_n=32)
    assert result.passes == 1 and set(result.tau) == set(cal_store.TAU_CORE)
    for n, v in result.tau.items():  # the first use is never timed
        assert v == pytest.approx(_steep(n))
    # (max - min) / median of the two runs, whose median is their mean
    spreads = [0.010 / (0.04 * _steep(n) + 0.010 / 2) for n in cal_store.TAU_CORE]
    assert result.noise == pytest.approx(statistics.median(spreads))


# The fake GPU: a target step of 8 ms, a draft step a fifth of it (an F16 target with a small
# draft), verification flat; each model's first use of a batch shape costs 40 ms more.
GPU_STEP, GPU_C, GPU_FIRST_USE = 0.008, 0.2, 0.040


def _fake_gpu_calibration(monkeypatch: pytest.MonkeyPatch, gpu: bool) -> Calibration:
    clock = Clock()
    monkeypatch.setattr(cal_store, "perf_counter", clock)
    target = _TimedModel(clock, GPU_STEP, _flat, GPU_FIRST_USE)
    draft = _TimedModel(clock, GPU_STEP * GPU_C, _flat, GPU_FIRST_USE, seed=3)
    return calibrate(target, draft, list(range(10)) * 30, max_n=K_MAX, gpu=gpu)


@pytest.mark.parametrize("gpu", [False, True], ids=["warm-up", "gpu"])
def test_a_gpu_whose_first_use_of_a_shape_costs_more_calibrates_to_its_true_curve(
    monkeypatch: pytest.MonkeyPatch, gpu: bool
) -> None:
    """A first use timed inside a pass read this GPU as a steep CPU (tau(2..28) 3.5-4.0, the
    draft's catch-ups 13.5 steps): every n must come out within 10 % of the true curve."""
    cal = _fake_gpu_calibration(monkeypatch, gpu)
    assert set(cal.tau) == set(cal_store.TAU_POINTS)  # flat: every length is worth measuring

    def off(measured: dict[int, float]) -> dict[int, float]:
        return {n: round(v, 2) for n, v in measured.items() if abs(v / _flat(n) - 1) > 0.10}

    assert off(cal.tau) == {} and off(cal.draft_tau) == {}
    assert cal.target_step_s == pytest.approx(GPU_STEP, rel=0.10)
    assert cal.c == pytest.approx(GPU_C, rel=0.10)
    assert cal.passes >= (cal_store.GPU_MIN_PASSES if gpu else cal_store.MIN_PASSES)


@pytest.mark.parametrize("gpu", [False, True], ids=["warm-up", "gpu"])
def test_on_the_fake_gpu_the_plan_is_the_one_its_true_costs_give(
    monkeypatch: pytest.MonkeyPatch,
    infos,
    gpu: bool,  # type: ignore[no-untyped-def]
) -> None:
    """With c = 0.2 the draft model pays on a flat curve: `auto` loads it, with the draft
    length and second choices (tree leaves) that the true costs give."""
    measured = _fake_gpu_calibration(monkeypatch, gpu)
    true = Calibration(
        GPU_STEP,
        {n: _flat(n) for n in cal_store.TAU_POINTS},
        GPU_STEP * GPU_C,
        draft_tau={n: _flat(n) for n in cal_store.DRAFT_POINTS},
    )
    files = (Path("t.gguf"), Path("d.gguf"))
    resources = choose_resources(hardware(8_000_000_000, gpu=True), *infos)
    plan = decide(Drafting.of(), *files, resources, measured)
    assert plan.draft == files[1] and "model" in plan.drafters
    got, want = plan.choice, decide(Drafting.of(), *files, resources, true).choice
    assert got is not None and want is not None and want.use_model
    assert got.leaves is not None and want.leaves is not None
    assert (got.model_k, got.tree.width, got.leaves.leaves) == (
        want.model_k,
        want.tree.width,
        want.leaves.leaves,
    )
    assert got.model_speed == pytest.approx(want.model_speed, rel=0.05)


def test_calibration_takes_a_gpu_only_where_layers_are_offloaded(
    monkeypatch: pytest.MonkeyPatch,
    infos,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """A GPU build that offloads no layer computes on the CPU; a target on RPC servers is
    counted as a GPU's (their devices are not known here)."""
    from edgespec.planner import make

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    asked: list[bool] = []

    def record(*args: object, gpu: bool, **kw: object) -> Calibration:
        asked.append(gpu)
        return Calibration(0.01, {1: 1.0})

    monkeypatch.setattr(make, "calibrate", record)
    server = ServerInfo(Endpoint("box", 1), PROTOCOL, ((1 << 40, 1 << 40),), 0.001)
    cases = [
        (False, None, ()),
        (True, None, ()),
        (True, 0, ()),
        (True, 10, ()),
        (False, None, (server,)),
    ]
    for gpu_build, layers, servers in cases:
        resources = choose_resources(
            hardware(8_000_000_000, gpu=gpu_build), *infos, n_gpu_layers=layers, servers=servers
        )
        make.measure_loaded(FakeTextModel(), None, "k", resources)
    assert asked == [False, True, False, True, True]


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
    from edgespec.models.gguf import read_gguf
    from edgespec.planner.decode_options import DecodeOptions
    from edgespec.planner.make import _calibration_key, _resources

    resources = _resources(read_gguf(real_pair.target), None, DecodeOptions(), None, ())
    here = _calibration_key(real_pair.target, None, resources)
    assert _calibration_key(real_pair.target, None, resources) == here
    elsewhere = replace(resources, hardware=replace(resources.hardware, logical_cores=64))
    assert _calibration_key(real_pair.target, None, elsewhere) != here


def test_the_calibration_key_does_not_hash_every_byte_of_a_model(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A first run's plan must not read a 3.5 GB target through (3.5 s before its first
    token): files are told apart by their size and head, where a GGUF's metadata is."""
    from edgespec.models import files

    monkeypatch.setattr(files, "sha256_file", lambda *a, **k: pytest.fail("hashed whole"))
    head = bytes(range(256)) * (16 << 12)  # 16 MB: a large vocabulary's metadata fits in it
    a, b, c, d = (tmp_path / n for n in "abcd")
    a.write_bytes(head + b"x" * (4 << 20))
    b.write_bytes(head + b"y" * (4 << 20))  # other weights, same shape
    c.write_bytes(head[::-1] + b"x" * (4 << 20))  # another header
    d.write_bytes(head + b"x" * (5 << 20))  # another size
    assert files.identity(a) == files.identity(b)
    assert len({files.identity(p) for p in (a, c, d)}) == 3
    from edgespec.planner.make import _calibration_key
    from tests.fakes import fake_plan

    resources = fake_plan().resources
    assert _calibration_key(a, d, resources) == _calibration_key(b, d, resources)
    assert _calibration_key(a, d, resources) != _calibration_key(c, d, resources)


class _TimedText(FakeTextModel):
    """The fake GPU as a text model `auto` runs on: n tokens cost step x tau(n), plus `first`
    the first time this model decodes n tokens together; it computes on a GPU (warms_shapes)."""

    warms_shapes = True

    def __init__(self, clock: Clock, step: float, first: float, **kw: object) -> None:
        super().__init__(n_ctx=1024, **kw)  # type: ignore[arg-type]
        self.clock, self.step, self.first = clock, step, first
        self.sizes: set[int] = set()

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.clock.now += self.step * _flat(len(tokens))
        if len(tokens) not in self.sizes:
            self.clock.now += self.first
        self.sizes.add(len(tokens))
        return super().decode(tokens, n_logits)


def _plain_step_after_first_rounds(monkeypatch: pytest.MonkeyPatch, first: float) -> float:
    """A new process on the fake GPU: `auto` from the GPU's true calibration, the rounds of one
    answer, and the plain step's price after them."""
    from edgespec.api import Speculator
    from edgespec.engine import generate, warmup
    from edgespec.planner.decide import cost_model

    clock = Clock()
    monkeypatch.setattr(generate, "perf_counter", clock)
    monkeypatch.setattr(warmup, "perf_counter", clock)
    target = _TimedText(clock, GPU_STEP, first, seed=1)
    draft = _TimedText(clock, GPU_STEP * GPU_C, first, seed=1, noise=1.0, noise_seed=5)
    true = Calibration(
        GPU_STEP,
        {n: _flat(n) for n in cal_store.TAU_POINTS},
        GPU_STEP * GPU_C,
        draft_tau={n: _flat(n) for n in cal_store.DRAFT_POINTS},
    )
    spec = Speculator(target, draft)
    spec.enable_auto(cost_model(true), use_model=True, step_s=GPU_STEP, draft_tau=true.draft_tau)
    spec.generate("abcabcabcabd abcabcabcabd abcabc", drafter="auto", max_tokens=24, raw=True)
    step = spec.learned_step_s  # the step itself, as the rounds priced it
    assert step is not None
    return step


def test_a_new_processs_first_rounds_on_the_fake_gpu_leave_the_plain_step_true(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each shape's first use in a process costs the fake GPU 40 ms more: timed in a round, it
    fed `auto`'s learner (a plain step priced at 17.7 ms of a true 8.0 after two rounds). A
    model that computes on a GPU runs each new shape once, untimed, before the round that uses
    it: the learned step stays within 10 % of the true one."""
    plain = _plain_step_after_first_rounds(monkeypatch, GPU_FIRST_USE)
    print(f"plain step learned after the first rounds: {plain * 1000:.2f} ms (true 8.00 ms)")
    assert plain == pytest.approx(GPU_STEP, rel=0.10)
    assert plain == pytest.approx(_plain_step_after_first_rounds(monkeypatch, 0.0), rel=1e-9)
