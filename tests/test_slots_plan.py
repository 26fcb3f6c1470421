"""A server's slots in the plan: each slot's KV cache counted in the memory plan, as many as
fit up to four unless `--parallel` says, what does not fit refused with the numbers."""

from __future__ import annotations

import pytest

from edgespec.errors import ConfigError
from edgespec.planner.decode_options import DecodeOptions
from edgespec.planner.plan import plan_document
from edgespec.planner.resources import DEFAULT_SLOTS, choose_resources
from tests.machines import hardware


def test_slots_are_as_many_as_fit_with_their_kv_caches_counted(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    one = choose_resources(hardware(8_000_000_000), t, d)
    four = choose_resources(hardware(8_000_000_000), t, d, parallel=None)
    assert (one.slots, four.slots) == (1, DEFAULT_SLOTS) and four.n_ctx == one.n_ctx
    for a, b in [(one.memory.target, four.memory.target), (one.memory.draft, four.memory.draft)]:
        assert a is not None and b is not None
        assert b.kv_cache == DEFAULT_SLOTS * a.kv_cache and b.weights == a.weights
    doc = plan_document(four, None, False, None)
    assert doc["settings"]["slots"] == DEFAULT_SLOTS
    assert doc["memory"]["target"]["kv_cache"] == four.memory.target.kv_cache
    # Where four do not fit next to both models, fewer do; the models come first.
    per_slot = four.memory.both - one.memory.both
    tight = hardware(int((one.memory.both + per_slot // 2) / 0.9))
    fewer = choose_resources(tight, t, d, parallel=None)
    assert 1 <= fewer.slots < DEFAULT_SLOTS and fewer.fit == one.fit
    assert fewer.memory.both <= fewer.memory.budget


def test_slots_asked_for_that_do_not_fit_are_refused_with_the_numbers(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    one = choose_resources(hardware(8_000_000_000), t, d)
    tight = hardware(int((one.memory.both + 1000) / 0.9))
    assert choose_resources(tight, t, d, parallel=1).slots == 1
    with pytest.raises(ConfigError, match=r"--parallel 3: 3 sequences of .* GB of RAM") as err:
        choose_resources(tight, t, d, parallel=3)
    assert err.value.field == "parallel"
    assert choose_resources(hardware(8_000_000_000), t, d, parallel=3).slots == 3
    with pytest.raises(ConfigError, match="--parallel must be >= 1"):
        DecodeOptions(parallel=0)


def test_plan_prints_the_slots_and_their_kv_cache_and_both_commands_pass_parallel_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from typer.testing import CliRunner

    from edgespec.cli import loading
    from edgespec.cli.app import app
    from tests.fakes import fake_plan

    asked: list[int | None] = []
    plan = fake_plan()
    slots = replace(plan, resources=replace(plan.resources, slots=2))
    monkeypatch.setattr(loading, "plan_only", lambda o, d: asked.append(o.parallel) or slots)
    out = CliRunner().invoke(app, ["plan", "--parallel", "2"]).stdout
    # The fake plan's memory: 0.12 GB and 0.05 GB of KV cache for the two models.
    assert "serve 2 slots (requests generated at once, --parallel): KV cache 0.09 GB each" in out
    assert "0.17 GB in all" in out

    def stop(options: DecodeOptions, drafting: object) -> None:
        asked.append(options.parallel)
        raise ConfigError("stop here")

    monkeypatch.setattr(loading, "load", stop)
    CliRunner().invoke(app, ["serve", "--parallel", "3"])
    CliRunner().invoke(app, ["serve"])
    assert asked == [2, 3, None]
