"""edgespec/auto/replay.py: auto's policy replayed on a recorded output, charged by tau."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from edgespec.auto import replay as rp
from edgespec.auto.config import AUTO
from edgespec.engine.drafters import top_two
from edgespec.engine.events import RoundEvent

SIZES = (*range(1, 18), 20, 24, 28, 32)


def _run(out: list[int], prompt: list[int]) -> dict[str, object]:
    return {"suite": "s", "prompt": prompt, "out": out, "history": []}


def test_a_copy_pays_where_verifying_is_flat_and_never_where_it_is_linear() -> None:
    rng = random.Random(0)
    prompt = [rng.randrange(50_000) for _ in range(200)]  # large ids: remapped by the replay
    copied = _run(prompt[40:160], prompt)
    flat = {n: 1.0 + 0.02 * (n - 1) for n in SIZES}
    assert rp.replay(copied, flat) > 3.0
    # Verifying n tokens costs n steps: no draft can pay, so none is made.
    assert rp.replay(copied, {n: float(n) for n in SIZES}) == 1.0
    # Nothing to copy: plain decoding's speed, whatever the device.
    fresh = _run([rng.randrange(50_000, 60_000) for _ in range(60)], prompt)
    assert rp.replay(fresh, flat) == pytest.approx(1.0, abs=0.05)


def test_the_recorded_target_predicts_the_recorded_text() -> None:
    target = rp.Recorded([5, 6, 7, 8], n_vocab=10)
    assert target.decode([5, 6], 2).argmax(axis=1).tolist() == [6, 7]
    target.rewind(1)
    assert target.decode([3], 1).argmax() == 9  # off the record: the end of generation
    assert target.is_eog(9) and not target.is_eog(8)


def test_trees_replay_the_recorded_output() -> None:
    # The prompt ends where the same lead-in went three ways before: on a flat device the
    # policy verifies them all as one tree, and the target takes the second.
    rng = random.Random(1)
    lead = [1, 2, 3, 4, 5, 6]
    ways = [[rng.randrange(10, 99) for _ in range(12)] for _ in range(3)]
    prompt = [*lead, *ways[0], 7, *lead, *ways[1], 8, *lead, *ways[2], 9, *lead]
    flat = {n: 1.0 + 0.02 * (n - 1) for n in SIZES}
    # rounds() raises if the tokens kept from a tree leave the recorded output.
    replayed = rp.Replay(_run([*ways[1], 100], prompt), flat, tree_width=4)
    rounds = list(replayed.rounds())
    assert any(r.event.tree is not None for r in rounds), "no tree was verified"
    chains = rp.replay(_run([*ways[1], 100], prompt), flat)
    assert len(replayed.recorded.out) / sum(r.steps for r in rounds) > chains


def test_the_recorded_draft_goes_on_after_a_miss_as_the_real_one_did() -> None:
    """On the text, the recorded two likeliest tokens; after a wrong one, the confidences
    recorded after that miss, on a token the target never takes; past them, no idea."""
    from edgespec.auto.prior import CostModel

    text, start = [1, 2, 3, 4, 5, 6], 2  # prompt [1, 2]; the draft missed at output position 1
    rows = [[3, 7, 0.9, 0.05], [8, 4, 0.6, 0.3], [5, 7, 0.95, 0.01], [6, 7, 0.9, 0.05]]
    off = {"1": [0.97, 0.5]}

    def top(draft: Any, seen: list[int]) -> tuple[int, float]:
        row = draft._row(seen)
        probs = np.exp(row - row.max())
        probs /= probs.sum()
        return int(row.argmax()), float(probs.max())

    draft = rp.RecordedDraft(text, start, rows, 11, CostModel({1: 1.0}, 0), off)
    assert top(draft, [1, 2, 3]) == (8, pytest.approx(0.6, abs=0.01))  # on the text: the miss
    assert top(draft, [1, 2, 3, 8]) == (10, pytest.approx(0.97))  # after it
    assert top(draft, [1, 2, 3, 8, 10]) == (10, pytest.approx(0.5))
    assert top(draft, [1, 2, 3, 8, 10, 10])[1] == pytest.approx(2 / 11)  # past it: no idea
    assert rp.Recorded(text, 11).is_eog(10)  # the target never takes it mid-text
    # Off the text the draft's second choice is the other id the text never holds, not one of
    # the evenly spread rest (which a tree leaf could offer and the target accept).
    for seen in ([1, 2, 3, 8], [1, 2, 3, 8, 10, 10], [1, 2, 3, 4, 5, 6, 7]):
        (first, _), (second, _) = top_two(draft._row(seen))
        assert (first, second) == (10, 9)
    blind = rp.RecordedDraft(text, start, rows, 11, CostModel({1: 1.0}, 0))
    assert top(blind, [1, 2, 3, 8])[1] == pytest.approx(2 / 11)  # without `off`: no idea at once


def test_a_recorded_pair_replays_a_run_in_its_own_small_vocabulary() -> None:
    run = {"prompt": [900, 901], "out": [902, 900], "draft": [[902, 903, 0.8, 0.1]] * 2}
    recorded = rp.recorded_run(run, {1: 1.0})
    prompt, out, target, draft = recorded.prompt, recorded.out, recorded.target, recorded.draft
    assert prompt == [0, 1] and out == [2, 0]  # 903 only ever a second choice: id 3
    # ids 4 and 5 are never in the text: the draft's choices off it, the target's end
    assert target.decode(prompt, 1).argmax() == 2 and target.n_vocab == draft.n_vocab == 6
    assert int(draft.decode(prompt, 1)[0].argmax()) == 2


@pytest.mark.parametrize("width", [1, 4])
def test_a_sampled_answer_replays_the_lookup_rounds_auto_ran_on_it(width: int) -> None:
    # At temperature > 0 a lookup's token is accepted exactly when the target's sampled token
    # is that token, so the rounds are a function of the answer: replaying them on it, with a
    # target that only knows the answer, must give the rounds the sampling run made.
    from edgespec.auto.policy import AdaptiveDraftLength
    from edgespec.auto.prior import CostModel
    from edgespec.auto.suffix import SuffixDrafter
    from edgespec.engine.drafters import EitherDrafter
    from edgespec.engine.events import TokenEvent
    from edgespec.engine.generate import GenerationConfig, Session
    from edgespec.engine.sampling import SamplingParams
    from tests.fakes import FakeModel

    flat = {n: 1.0 + 0.02 * (n - 1) for n in SIZES}
    # A peaked order-2 model samples text that runs in loops, with a slip now and then: its
    # lookups are taken up, accepted and rejected.
    target = FakeModel(n_vocab=16, seed=3, scale=6.0, tree_width=width)
    prompt = [1, 2, 3, 4, 5, 1, 2, 3]

    def rounds(model: Any, prompt: list[int], config: GenerationConfig) -> tuple[list, list]:
        policy = AdaptiveDraftLength(CostModel(flat, 0.0), tree_width=width)
        events = list(
            Session(model).generate(prompt, EitherDrafter(SuffixDrafter()), config, policy)
        )
        drafts = [(e.drafter, e.drafted, e.accepted) for e in events if isinstance(e, RoundEvent)]
        return drafts, [e.token for e in events if isinstance(e, TokenEvent)]

    sampling = SamplingParams(temperature=0.8, seed=5)
    live, out = rounds(target, prompt, GenerationConfig(max_tokens=160, sampling=sampling))
    assert any(0 < a < d for _, d, a in live), "no lookup was partly rejected"
    assert any(a == d > 0 for _, d, a in live), "no lookup was taken in full"
    recorded = rp.recorded_run(_run(out, prompt), flat, width)
    replayed, again = rounds(
        recorded.target, recorded.prompt, GenerationConfig(max_tokens=len(out))
    )
    assert len(again) == len(out)
    assert replayed == live


def _copying_run() -> dict[str, object]:
    rng = random.Random(4)
    prompt = [rng.randrange(50_000) for _ in range(200)]
    return _run(prompt[40:160], prompt)


FLAT = {n: 1.0 + 0.02 * (n - 1) for n in SIZES}


def test_a_replay_shows_each_round_with_the_choice_that_made_it() -> None:
    replayed = rp.Replay(_copying_run(), FLAT)
    rounds = list(replayed.rounds())
    drafted = [r for r in rounds if r.event.drafted]
    assert drafted, "the copy was never drafted"
    for r in drafted:  # each round's choice is the one its event drafted
        assert r.choice is not None and r.event.drafted <= r.choice.k
    # Where the rounds start, and what they were charged: tau of what they verified.
    ats = [r.at for r in rounds]
    assert ats[0] == 0 and ats == sorted(ats)
    ends = [a + r.event.accepted + 1 for a, r in zip(ats, rounds, strict=True)]
    assert ats[1:] == ends[:-1] and ends[-1] == len(replayed.recorded.out)
    assert [r.steps for r in rounds] == [replayed.costs.tau(r.event.drafted + 1) for r in rounds]
    assert len(replayed.recorded.out) / sum(r.steps for r in rounds) == rp.replay(
        _copying_run(), FLAT
    )


def test_a_watch_stands_between_the_policy_and_the_engine() -> None:
    """A watch that never lets a draft through makes plain decoding; the policy it wraps is
    still told every round (as it is without the watch)."""
    told: list[RoundEvent] = []

    class Plain:
        def __init__(self, policy: Any, target: rp.Recorded) -> None:
            self.policy = policy

        def choose(self, proposals: Any) -> None:
            self.policy.choose(proposals)
            return None

        def observe(self, choice: Any, round_: Any, seconds: float) -> None:
            told.append(round_)
            self.policy.observe(choice, round_, seconds)

    assert rp.replay(_copying_run(), FLAT, watch=Plain) == 1.0
    assert len(told) == 120 and all(r.drafted == 0 for r in told)


def test_a_replay_starts_from_the_state_it_is_given_and_leaves_it_the_policys() -> None:
    from edgespec.auto.policy import AdaptiveState, Bucket

    doubting = AdaptiveState()
    doubting.alpha = dict.fromkeys(doubting.alpha, 0.01)  # no lookup is worth drafting
    replayed = rp.Replay(_copying_run(), FLAT, state=doubting)
    assert replayed.policy.state is doubting
    fresh = rp.replay(_copying_run(), FLAT)
    assert replayed.speed() < fresh
    assert doubting.alpha[Bucket.COPY] > 0.01  # what it learned on the way is in it


def test_policy_config_sets_policy_fields_by_name() -> None:
    config = rp.policy_config(["probe_after=8", "lookup_risk=2.5"])
    assert (config.policy.probe_after, config.policy.lookup_risk) == (8, 2.5)
    assert rp.policy_config([]) == AUTO
