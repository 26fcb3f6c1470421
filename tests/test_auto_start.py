"""`auto` started per generation: fresh objects from one request's settings, what is learned
across generations passed in, the policy told each round's outcome by the engine."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import edgespec.auto
from edgespec.api import Speculator
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.auto.start import AutoSettings, Learned, start
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine import generate as generate_module
from edgespec.engine.drafters import Choice, Lookup, NgramDrafter
from edgespec.engine.events import RoundEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.options import AutoSwitches
from tests.copy_texts import FILE
from tests.fakes import Clock, FakeTextModel

FLAT = CostModel({n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16, 32)}, 0.1)
PROMPT = "abcabcabcabd abcabcabcabd abcabc"
AUTO_DIR = Path(edgespec.auto.__file__).parent
CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")


def _speculator() -> Speculator:
    target = FakeTextModel(seed=1, n_ctx=512, tree_width=4)
    draft = FakeTextModel(seed=1, n_ctx=512, noise=1.0, noise_seed=5)
    spec = Speculator(target, draft)
    spec.enable_auto(FLAT, use_model=True, step_s=0.01)
    return spec


def test_each_generation_starts_its_own_drafter_and_policy_from_its_settings() -> None:
    spec = _speculator()
    first_drafter, first = spec.strategy("auto:trees=0", 7)
    second_drafter, second = spec.strategy("auto", 3)
    assert first_drafter is not second_drafter and first is not second
    assert isinstance(first, AdaptiveDraftLength) and isinstance(second, AdaptiveDraftLength)
    # Starting the second left the first as it was asked for.
    assert (first.k_max, first.tree_width) == (7, 1)
    assert (second.k_max, second.tree_width) == (3, 4)
    # What is learned across generations is shared: the device's costs, the conversation's rates.
    assert first.costs is second.costs and first.state is second.state


def test_a_generations_settings_cannot_be_changed_after_it_starts() -> None:
    drafter, policy = start(AutoSettings(k_max=5), Learned.begin(FLAT))
    with pytest.raises(AttributeError):
        policy.tree_width = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        policy.k_max = 9  # type: ignore[misc]
    suffix = drafter.lookup
    assert isinstance(suffix, SuffixDrafter)
    with pytest.raises(AttributeError):
        suffix.switches = AutoSwitches(resume=False)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        suffix.switches.edits = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        AutoSettings().k_max = 1  # type: ignore[misc]
    # No setter is left to reconfigure a shared object per request.
    for name in ("limit", "forget", "end"):
        assert not hasattr(policy, name)
    for name in ("switch", "expect", "serve", "remember", "forget"):
        assert not hasattr(suffix, name)


def _interleaved(
    settings: Sequence[AutoSettings], learned: Learned, prompt: list[int]
) -> list[tuple[list[int], list[RoundEvent]]]:
    """Generations started from `settings` on one `learned`, their events taken in turn."""
    runs = []
    for one in settings:
        drafter, policy = start(one, learned)
        target = FakeTextModel(seed=1, n_ctx=512, tree_width=4)
        events = Session(target).generate(prompt, drafter, GenerationConfig(max_tokens=40), policy)
        runs.append((iter(events), [], []))
    live = list(runs)
    while live:
        for run in list(live):
            event = next(run[0], None)
            if event is None:
                live.remove(run)
            elif isinstance(event, TokenEvent):
                run[1].append(event.token)
            elif isinstance(event, RoundEvent):
                run[2].append(event)
    return [(tokens, rounds) for _, tokens, rounds in runs]


def test_interleaved_generations_draft_within_their_own_limits() -> None:
    """Two generations on one `Learned`, their rounds interleaved (two requests at once, on
    two sessions): each drafts within its own K and width, and both give plain decoding's
    tokens."""
    target = FakeTextModel(seed=1, n_ctx=512)
    prompt = target.tokenize(PROMPT)
    plain = [
        e.token
        for e in Session(target).generate(
            prompt, SuffixDrafter(), GenerationConfig(max_tokens=40), 0
        )
        if isinstance(e, TokenEvent)
    ]
    settings = [AutoSettings(k_max=2), AutoSettings(k_max=16, tree_width=4)]
    (short, short_rounds), (long, long_rounds) = _interleaved(settings, Learned.begin(FLAT), prompt)
    assert short == long == plain
    assert max(r.k for r in short_rounds) == 2 and not any(r.tree for r in short_rounds)
    assert max(r.k for r in long_rounds) > 2


def test_the_policy_reads_no_clock_the_engine_tells_it_each_rounds_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every clock is broken inside `auto` (the time module's and any name an auto module
    bound); the engine's own clock is a fake one that moves a step per reading, and the policy
    learns from the seconds the engine hands it with each round's choice."""

    def broken() -> float:
        raise AssertionError("auto read a clock")

    for module_info in pkgutil.iter_modules(edgespec.auto.__path__, "edgespec.auto."):
        module = importlib.import_module(module_info.name)
        for name in CLOCKS:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, broken)
    clock = Clock()

    def engine_clock() -> float:
        clock.now += 0.01
        return clock.now

    monkeypatch.setattr(generate_module, "perf_counter", engine_clock)
    for name in CLOCKS:
        monkeypatch.setattr(time, name, broken)
    spec = _speculator()
    told: list[tuple[Choice | None, float]] = []
    drafter, policy = spec.strategy("auto")
    assert isinstance(policy, AdaptiveDraftLength)
    observe = policy.observe

    def watched(choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        told.append((choice, seconds))
        observe(choice, round_, seconds)

    monkeypatch.setattr(policy, "observe", watched)
    prompt = spec.prompt_tokens(PROMPT, raw=True)
    events = list(spec.session.generate(prompt, drafter, GenerationConfig(max_tokens=48), policy))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert len(told) == len(rounds) and any(r.drafted for r in rounds)
    assert {r.drafter for r in rounds if r.drafted} >= {"suffix"}
    # Each round's time is the engine's: whole readings of its clock, its start to its end.
    assert all(seconds > 0 and round(seconds / 0.01, 6).is_integer() for _, seconds in told)
    assert policy.costs.accuracy.median()  # predictions checked against those times


def test_no_module_of_auto_imports_a_clock() -> None:
    for path in AUTO_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(a.name not in ("time", "datetime") for a in node.names), path.name
            elif isinstance(node, ast.ImportFrom):
                assert node.module not in ("time", "datetime"), path.name


def test_offer_is_a_query_the_context_is_indexed_on_commit() -> None:
    drafter = SuffixDrafter()
    prompt, later = FILE[:20], FILE[:26]
    drafter.begin(prompt)
    indexed = drafter.live.tokens
    first = drafter.offer(later, 8)
    assert drafter.live.tokens == indexed  # offering read the index, grew nothing
    assert drafter.offer(later, 8) == first
    drafter.commit(later)
    assert drafter.live.tokens == len(later)


def test_the_ngram_drafter_too_drafts_from_the_committed_context_only() -> None:
    drafter = NgramDrafter()
    drafter.begin([5])
    context = [5, 1, 2, 3, 1, 2]
    assert drafter.offer(context, 4) == []  # nothing of it committed yet: nothing indexed
    drafter.commit(context)
    (lookup,) = drafter.offer(context, 4)
    assert isinstance(lookup, Lookup) and lookup.continuation == (3, 1, 2) and lookup.match == 2
    assert drafter.offer(context, 4) == [lookup]  # a query: asked again, the same answer
