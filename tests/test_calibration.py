"""Calibration: measuring the verification curve within a budget, and its cache."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgespec.planner import calibrate as cal_store
from edgespec.planner.calibrate import Calibration, calibrate
from tests.fakes import Clock, FakeModel


class _TimedModel(FakeModel):
    """Decoding n tokens takes step x tau(n) on `clock`."""

    def __init__(self, clock: Clock, step: float, tau: Callable[[int], float]) -> None:
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
    clock = Clock()
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
