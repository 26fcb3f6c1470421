"""The engine's own cost per token: the benchmark that guards it runs (tiny, untimed), and the
shortcuts that cut it (a distribution that knows its support, residuals on it) draw exactly
what the whole row draws."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np

from edgespec.engine.sampling import Sampler, SamplingParams, support_of
from edgespec.engine.verify import after_rejection
from tests.conftest import ROOT
from tests.script_module import load_file


def load_module() -> ModuleType:
    return load_file(ROOT / "benchmarks/overhead/overhead.py")


def test_the_benchmark_reports_every_configuration_by_part(tmp_path: Path) -> None:
    overhead = load_module()
    out = tmp_path / "overhead.json"
    results = overhead.main(
        ["--vocab", "700", "--tokens", "12", "--repeats", "1", "--json", str(out)]
    )
    assert json.loads(out.read_text()) == results
    names = {c.name for c in overhead.configs(["none", "model", "auto"])}
    assert set(results) == names and len(names) == 12
    for name, row in results.items():
        assert row["us_per_token"] > 0, name
        assert all(row[part] >= 0 for part in overhead.PARTS), name
        assert sum(row[part] for part in overhead.PARTS) > 0, name
        if name.startswith("none"):
            assert row["draft_steps_per_token"] == 0, name
        elif name.startswith("model") and "json" not in name:  # json: may end within forced text
            assert row["draft_steps_per_token"] > 0, name
    assert all(results[n]["grammar"] == 0 for n in names if "json" not in n)


def test_the_benchmarks_instant_models_decode_losslessly() -> None:
    """Greedy, every drafter writes plain decoding's text with the fake models too (a draft
    that disagrees at a fifth of the positions, trees for auto)."""
    overhead = load_module()
    bench = overhead.Bench.make(500, copy_logits=False)
    for grammar in (False, True):
        texts = {
            d: bench.run(overhead.Config(d, 0.0, grammar), 40)["text"]
            for d in ("none", "model", "auto")
        }
        assert texts["none"] and len(set(texts.values())) == 1, texts


def test_the_head_floor_benchmark_times_every_way_of_reading_a_head(tmp_path: Path) -> None:
    """head_floor.py (tiny, untimed) runs, checks that every way it times finds the head
    `flatnonzero` finds, and reports each for confident and flat rows."""
    head_floor = load_file(ROOT / "benchmarks/overhead/head_floor.py")
    out = tmp_path / "head.json"
    results = head_floor.main(
        ["--vocab", "4096", "--rows", "16", "--repeats", "2", "--json", str(out)]
    )
    assert json.loads(out.read_text()) == results
    counts = results.pop("rows")
    assert set(results) == set(head_floor.operations()) and sum(counts.values()) == 16
    assert all(row and all(v > 0 for v in row.values()) for row in results.values())
    row = np.zeros(4096, dtype=np.float32)
    row[[5, 9, 4000]] = [3.0, 3.0, -20.0]
    mask = row >= row.max() + head_floor.FLOOR
    assert list(head_floor.words(mask)) == list(np.flatnonzero(mask)) != [5, 9]
    row[:] = -30.0
    row[[5, 9, 4000]] = [3.0, 3.0, -20.0]
    assert list(head_floor.words(row >= row.max() + head_floor.FLOOR)) == [5, 9]
    assert list(head_floor.columns(row)) == [5, 9]
    row[[77, 3001]] = 3.0  # ties in other columns
    assert list(head_floor.columns(row)) == [5, 9, 77, 3001]
    row[:] = 0.0
    assert np.array_equal(head_floor.columns(row), np.arange(4096))


def rows(seed: int, n: int = 151_936) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.7, n).astype(np.float32)
    logits[rng.choice(n, 40, replace=False)] += rng.uniform(8.0, 16.0, 40).astype(np.float32)
    return logits


def test_a_sampled_distribution_knows_its_support_and_its_copies_do_not() -> None:
    sampler = Sampler(SamplingParams(temperature=0.7, top_p=0.95, seed=1))
    for seed in range(5):
        p = sampler.probs(rows(seed))
        assert np.array_equal(support_of(p), np.flatnonzero(p))
        assert getattr(p.copy(), "support", None) is None
        assert getattr(p / 2, "support", None) is None


def test_draws_and_residuals_on_the_support_are_the_whole_rows() -> None:
    """The same uniform number picks the same token as the dense inverse CDF over the whole
    row, for the target's own draw and for the residual after a rejection."""
    params = SamplingParams(temperature=0.7, top_p=0.95)
    for seed in range(20):
        p = Sampler(params).probs(rows(seed))
        q = Sampler(SamplingParams(temperature=1.0, top_p=0.99)).probs(rows(seed + 100))
        fast, dense = Sampler(params, np.random.default_rng(seed)), np.random.default_rng(seed)
        residual = np.maximum(np.asarray(p) - np.asarray(q), 0.0)
        if residual.sum() <= 0:
            residual = np.asarray(p)
        for row, drawn in (
            (p, fast.draw(p)),
            (residual / residual.sum(), after_rejection(p, q, fast)),
        ):
            cdf = np.cumsum(row)
            expected = int(np.searchsorted(cdf, dense.random() * cdf[-1], side="right"))
            assert drawn == expected and row[drawn] > 0


def test_the_benchmark_compares_the_rounds_cost_at_short_and_long_contexts() -> None:
    overhead = load_module()
    args = ["--vocab", "700", "--tokens", "12", "--repeats", "1", "--configs", "none,model"]
    results = overhead.main([*args, "--contexts", "20,300"])
    assert set(results) == {"none greedy", "model greedy", "none T=0.7", "model T=0.7"}
    assert all(set(row) == {"20", "300"} and min(row.values()) > 0 for row in results.values())
