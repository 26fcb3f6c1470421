"""The draft-verify loop on fake models: greedy speculation must reproduce plain decoding
exactly, and both KV caches must hold exactly the committed tokens."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgespec.auto.config import SuffixConfig
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.cache import CachedModel
from edgespec.engine.drafters import HybridDrafter, ModelDrafter, NgramDrafter, NoDrafter
from edgespec.engine.events import DoneEvent, RoundEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError, EdgespecError
from tests.fakes import FakeModel, pair

PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 0, 5]


def make_drafter(name: str, draft: FakeModel):  # type: ignore[no-untyped-def]
    if name == "model":
        return ModelDrafter(draft, p_min=0.0)
    if name == "ngram":
        return NgramDrafter(max_ngram=3, min_ngram=1)
    if name == "hybrid":
        return HybridDrafter(NgramDrafter(max_ngram=3, min_ngram=2), ModelDrafter(draft, p_min=0.0))
    if name == "suffix":
        return SuffixDrafter(SuffixConfig(min_n=1), past=[[0, 5, 1, 2, 3, 4, 7, 7, 7]])
    return NoDrafter()


def run(target, drafter, config, k, prompt=PROMPT):  # type: ignore[no-untyped-def]
    session = Session(target)
    events = list(session.generate(prompt, drafter, config, k))
    tokens = [e.token for e in events if isinstance(e, TokenEvent)]
    text = "".join(e.text for e in events if isinstance(e, TokenEvent))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return tokens, text, done


def plain_output(seed: int) -> tuple[list[int], str]:
    tokens, text, _ = run(FakeModel(seed=seed), NoDrafter(), GenerationConfig(max_tokens=60), 0)
    return tokens, text


def setup(case: str, seed: int) -> tuple[dict, GenerationConfig]:  # type: ignore[type-arg]
    """Model options and config for a case, derived from what the plain model generates, so
    every case really reaches the situation it names."""
    tokens, text = plain_output(seed)
    if case == "eog":  # the generated token that first appears latest ends generation mid-way
        return {"eog": max(set(tokens), key=tokens.index)}, GenerationConfig(max_tokens=200)
    if case == "stop":  # a stop string spanning several tokens, and one that only half matches
        return {}, GenerationConfig(max_tokens=200, stop=(text[7:11], text[2] + "\u2603"))
    if case == "max_tokens":
        return {}, GenerationConfig(max_tokens=13)
    if case == "context":
        return {"n_ctx": 40}, GenerationConfig(max_tokens=500)
    return {}, GenerationConfig(max_tokens=60)


CASES = ["plain", "eog", "stop", "max_tokens", "context"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_speculation_equals_plain_for_every_drafter_and_k(case: str, seed: int) -> None:
    kw, config = setup(case, seed)
    target, _ = pair(seed, **kw)
    expected = run(target, NoDrafter(), config, 0)
    assert expected[0], "the baseline generated nothing"
    for name, k in itertools.product(["model", "ngram", "suffix", "hybrid", "none"], range(1, 9)):
        target, draft = pair(seed, **kw)
        tokens, text, done = run(target, make_drafter(name, draft), config, k)
        assert (tokens, text, done.finish_reason) == (
            expected[0],
            expected[1],
            expected[2].finish_reason,
        ), (name, k)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_cases_reach_the_situations_they_name(seed: int) -> None:
    """Guards the test above: each case must really end the way it is named."""
    out = {}
    for case in CASES:
        kw, config = setup(case, seed)
        tokens, text, done = run(pair(seed, **kw)[0], NoDrafter(), config, 0)
        out[case] = (done.finish_reason, len(tokens), text)
    assert out["eog"][0] == "stop" and 2 < out["eog"][1] < 60
    full = plain_output(seed)[1]
    assert out["stop"][0] == "stop" and out["stop"][2] == full[:7]
    assert out["max_tokens"][:2] == ("length", 13)
    assert out["context"][0] == "context" and len(PROMPT) + out["context"][1] == 40


def test_speculation_really_accepts_drafts() -> None:
    target, draft = pair(0)
    _, _, done = run(target, ModelDrafter(draft, p_min=0.0), GenerationConfig(max_tokens=60), 4)
    assert done.stats.accepted > 0 and done.stats.rounds < 60
    target, _ = pair(0)
    _, _, done = run(target, NgramDrafter(min_ngram=1), GenerationConfig(max_tokens=60), 8)
    assert done.stats.accepted > 10  # the fake model falls into a cycle the lookup can copy


def test_eog_inside_an_accepted_run_stops_there() -> None:
    # A draft identical to the target accepts everything, so EOG arrives mid-round.
    target = FakeModel(seed=3, eog=2)
    plain = run(target, NoDrafter(), GenerationConfig(max_tokens=300), 0)
    target, draft = FakeModel(seed=3, eog=2), FakeModel(seed=3, eog=2)
    tokens, _, _ = run(target, ModelDrafter(draft, p_min=0.0), GenerationConfig(max_tokens=300), 8)
    assert plain[2].finish_reason == "stop" and tokens == plain[0] and tokens[-1] == 2
    assert target.n_past == len(PROMPT) + len(tokens) - 1
    assert draft.n_past <= len(PROMPT) + len(tokens)
    assert draft.tokens == (PROMPT + tokens)[: draft.n_past]


def test_no_draft_is_verified_past_an_end_of_generation() -> None:
    # The draft model is the target: its 8-token drafts run through EOG and on, all of which
    # the target would accept; the last round verifies the draft only as far as EOG.
    target, draft = FakeModel(seed=3, eog=2), FakeModel(seed=3, eog=2)
    plain, _, _ = run(FakeModel(seed=3, eog=2), NoDrafter(), GenerationConfig(max_tokens=300), 0)
    events = list(
        Session(target).generate(
            PROMPT, ModelDrafter(draft, p_min=0.0), GenerationConfig(max_tokens=300), 8
        )
    )
    tokens = [e.token for e in events if isinstance(e, TokenEvent)]
    last = [e for e in events if isinstance(e, RoundEvent)][-1]
    assert tokens == plain and tokens[-1] == 2
    assert 0 < last.drafted == last.accepted < 8


@pytest.mark.parametrize("name", ["model", "ngram", "hybrid", "none"])
def test_caches_hold_the_committed_tokens_after_every_round(name: str) -> None:
    target, draft = pair(4)
    session = Session(target)
    committed = list(PROMPT)
    before = len(committed)
    for event in session.generate(
        PROMPT, make_drafter(name, draft), GenerationConfig(max_tokens=80), 5
    ):
        if isinstance(event, TokenEvent):
            committed.append(event.token)
        elif isinstance(event, RoundEvent):
            assert target.tokens == committed[:-1]
            assert draft.tokens == committed[: draft.n_past]
            if len(committed) - before == event.accepted + 1:  # not cut short by the end
                assert event.target_token == committed[-1]  # after the accepted drafts
            before = len(committed)


@pytest.mark.parametrize("stop_after", [1, 3, 7, 20])
@pytest.mark.parametrize("name", ["model", "hybrid"])
def test_a_consumer_that_breaks_early_leaves_both_models_consistent(
    name: str, stop_after: int
) -> None:
    target, draft = pair(5)
    session = Session(target)
    committed = list(PROMPT)
    events = session.generate(PROMPT, make_drafter(name, draft), GenerationConfig(max_tokens=80), 6)
    for event in events:
        if isinstance(event, TokenEvent):
            committed.append(event.token)
            if len(committed) - len(PROMPT) == stop_after:
                break
    events.close()  # type: ignore[attr-defined]
    assert target.tokens == committed[:-1]
    assert draft.tokens == committed[: draft.n_past]
    # ... and the next generation from there is still exact.
    follow = [*committed, 3]
    fresh_target = FakeModel(seed=5)
    expected = run(fresh_target, NoDrafter(), GenerationConfig(max_tokens=30), 0, follow)[0]
    tokens = [
        e.token
        for e in session.generate(
            follow, make_drafter(name, draft), GenerationConfig(max_tokens=30), 6
        )
        if isinstance(e, TokenEvent)
    ]
    assert tokens == expected


def test_an_exception_inside_a_decode_is_rolled_back() -> None:
    _, draft = pair(6)

    class Flaky(FakeModel):
        calls = 0

        def decode(self, tokens, n_logits=1):  # type: ignore[no-untyped-def]
            out = super().decode(tokens, n_logits)
            Flaky.calls += 1
            if Flaky.calls == 4:
                raise KeyboardInterrupt  # as Ctrl-C would, right after llama.cpp returns
            return out

    flaky = Flaky(seed=6)
    session = Session(flaky)
    committed = list(PROMPT)
    with pytest.raises(KeyboardInterrupt):
        for event in session.generate(
            PROMPT, ModelDrafter(draft, p_min=0.0), GenerationConfig(), 4
        ):
            if isinstance(event, TokenEvent):
                committed.append(event.token)
    assert flaky.tokens == committed[:-1]
    assert draft.tokens == committed[: draft.n_past]


def test_kv_cache_is_reused_by_the_next_generation() -> None:
    target, _ = pair(7)
    session = Session(target)
    first = [e for e in session.generate(PROMPT, NoDrafter(), GenerationConfig(max_tokens=10), 0)]
    out = [e.token for e in first if isinstance(e, TokenEvent)]
    before = target.decoded_tokens
    second_prompt = PROMPT + out + [1, 2, 3]
    events = list(session.generate(second_prompt, NoDrafter(), GenerationConfig(max_tokens=5), 0))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.stats.prompt_cached == len(PROMPT) + len(out) - 1
    # Decoded again: the last generated token (never decoded) and the new tokens but the last,
    # which each round then decodes with one more.
    new_prompt_tokens = len(second_prompt) - 1 - done.stats.prompt_cached
    assert new_prompt_tokens == 3
    assert target.decoded_tokens - before == new_prompt_tokens + done.stats.rounds


def test_prompt_that_does_not_fit_is_a_clear_error() -> None:
    target = FakeModel(n_ctx=8)
    with pytest.raises(ConfigError, match="context holds 8"):
        Session(target).generate(list(range(8)), NoDrafter())
    with pytest.raises(ConfigError, match="empty"):
        Session(target).generate([], NoDrafter())


def test_negative_k_is_refused() -> None:
    with pytest.raises(ConfigError, match="K"):
        Session(FakeModel()).generate(PROMPT, NoDrafter(), k=-1)


def test_sampled_speculation_is_reproducible_with_a_seed() -> None:
    config = GenerationConfig(max_tokens=40, sampling=SamplingParams(temperature=0.9, seed=11))
    a = run(*(lambda t, d: (t, ModelDrafter(d, p_min=0.0)))(*pair(8)), config, 4)[0]
    b = run(*(lambda t, d: (t, ModelDrafter(d, p_min=0.0)))(*pair(8)), config, 4)[0]
    assert a == b and len(a) == 40


def test_stats_follow_the_usual_definitions() -> None:
    target, draft = pair(9)
    _, _, done = run(target, ModelDrafter(draft, p_min=0.0), GenerationConfig(max_tokens=50), 4)
    s = done.stats
    assert s.acceptance_rate == pytest.approx(s.accepted / s.drafted)
    assert s.mean_accepted_length == pytest.approx(1 + s.accepted / s.rounds)
    assert s.by_drafter["model"].accepted == s.accepted
    assert np.isclose(s.draft_share, s.draft_s / (s.draft_s + s.verify_s))


def test_two_interleaved_generations_are_refused_and_leave_the_first_exact() -> None:
    target, draft = pair(12)
    config = GenerationConfig(max_tokens=30)
    fresh_target, fresh_draft = pair(12)
    expected = run(fresh_target, ModelDrafter(fresh_draft, p_min=0.0), config, 4)[0]
    session = Session(target)
    drafter = ModelDrafter(draft, p_min=0.0)
    first = session.generate(PROMPT, drafter, config, 4)
    tokens = [e.token for e in itertools.islice(first, 3) if isinstance(e, TokenEvent)]
    second = session.generate([2, 2, 2], NoDrafter(), config, 0)
    with pytest.raises(EdgespecError, match="another generation is still running"):
        next(second)
    tokens += [e.token for e in first if isinstance(e, TokenEvent)]
    assert tokens == expected
    # Once the first is done, the next generation runs.
    assert any(isinstance(e, DoneEvent) for e in session.generate([2, 2, 2], NoDrafter(), config))


class RewindThenInterrupt(FakeModel):
    """Ctrl-C landing right after llama.cpp has truncated the cache."""

    def rewind(self, n_past: int) -> None:
        super().rewind(n_past)
        raise KeyboardInterrupt


def test_an_interrupted_rewind_never_leaves_the_mirror_ahead_of_the_cache() -> None:
    model = RewindThenInterrupt()
    cache = CachedModel(model)
    cache.decode([1, 2, 3, 4, 5], 1)
    with pytest.raises(KeyboardInterrupt):
        cache.keep(2)
    assert cache.tokens == model.tokens == [1, 2]
