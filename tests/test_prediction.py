"""Predicted outputs: a prediction drafted as a lookup that finds its place again after an
edit, lossless, with OpenAI's two usage counters read from the draft log."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.bench.configs import parse_configs
from edgespec.bench.runner import run_bench
from edgespec.bench.suites import BenchPrompt
from edgespec.cli import loading
from edgespec.cli.app import app as cli
from edgespec.engine.drafters import PREDICTION, DrafterKind, Lookup, Proposal
from edgespec.engine.events import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.engine.prediction import PredictionDrafter, WithPrediction
from edgespec.errors import ConfigError
from edgespec.speculator import drafting
from tests.fakes import FakeTextModel

FLAT = CostModel({n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16, 32)}, 0.1)
PROMPT = "write it out"


def _offered(drafter: PredictionDrafter, tokens: Sequence[int]) -> tuple[int, ...]:
    offers = drafter.offer(tokens, 32)
    return offers[0].continuation if offers else ()


def test_the_lookup_follows_the_prediction_and_skips_what_the_answer_replaced() -> None:
    prediction = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    drafter = PredictionDrafter(prediction)
    context = [1, 2, 3]
    drafter.begin(context)
    assert _offered(drafter, context) == tuple(prediction)  # the answer starts with it
    context += [10, 11, 12]
    drafter.commit(context)
    assert _offered(drafter, context) == (13, 14, 15, 16, 17, 18, 19)
    context += [99]  # an edit: 13 14 replaced by 99 98
    drafter.commit(context)
    assert _offered(drafter, context) == ()
    context += [98, 15, 16]
    drafter.commit(context)
    offer = drafter.offer(context, 32)[0]
    assert offer.continuation == (17, 18, 19) and offer.match == 2 and offer.source == PREDICTION
    assert not offer.resumed  # two tokens may match by chance
    context += [17]
    drafter.commit(context)
    offer = drafter.offer(context, 32)[0]
    assert offer.continuation == (18, 19) and offer.match == 3 and offer.resumed


def test_a_place_found_again_is_the_first_past_where_the_answer_left() -> None:
    # "5 6" occurs before and after the replaced token 3: the answer takes up the later one.
    drafter = PredictionDrafter([5, 6, 1, 2, 3, 5, 6, 4, 7, 8, 9])
    context = [0]
    drafter.begin(context)
    context += [5, 6, 1, 2, 42, 5, 6]
    drafter.commit(context)
    assert _offered(drafter, context) == (4, 7, 8, 9)
    context += [4, 7, 8]
    drafter.commit(context)
    offer = drafter.offer(context, 32)[0]
    assert offer.continuation == (9,) and offer.match == 5 and offer.resumed


def _speculator() -> Speculator:
    target = FakeTextModel(seed=1, n_ctx=512)
    draft = FakeTextModel(seed=1, n_ctx=512, noise=1.0, noise_seed=5)
    spec = Speculator(target, draft)
    spec.enable_auto(FLAT, use_model=True, step_s=0.01)
    return spec


def _run(spec: Speculator, **kw: object) -> tuple[list[int], list[RoundEvent], GenerationStats]:
    tokens: list[int] = []
    rounds: list[RoundEvent] = []
    done = None
    events: Sequence[Event] = list(spec.stream(PROMPT, max_tokens=80, **kw))  # type: ignore[arg-type]
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, RoundEvent):
            rounds.append(event)
        elif isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return tokens, rounds, done.stats


@pytest.mark.parametrize("drafter", ["auto", "auto:model=0", "model", "ngram"])
def test_an_edited_prediction_is_drafted_losslessly_and_counted_from_the_draft_log(
    drafter: str,
) -> None:
    spec = _speculator()
    plain, _, _ = _run(spec, drafter="none")
    # The answer with a span of it replaced: what the answer will "edit" back.
    prediction = [*plain[:30], 3, 3, 3, 3, *plain[36:]]
    out, rounds, stats = _run(spec, drafter=drafter, prediction=prediction)
    assert out == plain
    drafted = sum(r.drafted for r in rounds if r.drafter == PREDICTION)
    accepted = sum(r.accepted for r in rounds if r.drafter == PREDICTION)
    assert stats.accepted_prediction_tokens == accepted > 30
    assert stats.rejected_prediction_tokens == drafted - accepted
    # Past the replaced span the prediction was found again and drafted from.
    emitted, late = 0, 0
    for r in rounds:
        if r.drafter == PREDICTION and emitted >= 36:
            late += r.accepted
        emitted += r.accepted + 1
    assert late > 0
    assert stats.as_dict()["accepted_prediction_tokens"] == accepted


def test_plain_decoding_ignores_a_prediction() -> None:
    spec = _speculator()
    plain, _, _ = _run(spec, drafter="none")
    out, rounds, stats = _run(spec, drafter="none", prediction=plain)
    assert out == plain and all(r.drafted == 0 for r in rounds)
    assert stats.accepted_prediction_tokens == stats.rejected_prediction_tokens == 0


def test_a_prediction_wrong_everywhere_is_dropped_after_the_answers_first_token() -> None:
    spec = _speculator()
    plain, _, _ = _run(spec, drafter="auto")
    # Tokens the answer never writes: after its first token nothing matches them again.
    wrong = [t for t in range(spec.target.n_vocab) if t not in plain]
    assert wrong
    out, rounds, stats = _run(spec, drafter="auto", prediction=wrong * 20)
    assert out == plain
    assert [r for r in rounds[1:] if r.drafter == PREDICTION] == []
    assert stats.rejected_prediction_tokens <= 32


def test_a_prediction_larger_than_the_context_is_refused_naming_it() -> None:
    spec = _speculator()
    with pytest.raises(ConfigError) as info:
        spec.stream(PROMPT, prediction="a" * 513)
    assert info.value.field == "prediction"
    assert isinstance(
        PredictionDrafter([1, 2]).offer([0], 4)[0], Lookup
    )  # a fitting one is drafted from


def _done(stdout: str) -> dict[str, Any]:
    return next(d for d in map(json.loads, stdout.splitlines()) if d["type"] == "done")


def test_run_drafts_from_a_prediction_file_or_stdin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = Speculator(FakeTextModel(seed=1, n_ctx=512), None)
    monkeypatch.setattr(loading, "load", lambda options, drafting: spec)
    want = spec.generate(PROMPT, drafter="none", max_tokens=40)
    (tmp_path / "file.txt").write_text(want)
    args = ["run", PROMPT, "-n", "40", "--drafter", "ngram", "--json"]
    from_file = CliRunner().invoke(cli, [*args, "--prediction", str(tmp_path / "file.txt")])
    assert from_file.exit_code == 0, from_file.output
    stats = _done(from_file.stdout)["stats"]
    assert stats["accepted_prediction_tokens"] > 20
    assert stats["rejected_prediction_tokens"] == 0
    piped = CliRunner().invoke(cli, [*args, "--prediction", "-"], input=want)
    assert piped.exit_code == 0, piped.output
    counters = ("accepted_prediction_tokens", "rejected_prediction_tokens")
    assert [_done(piped.stdout)["stats"][k] for k in counters] == [stats[k] for k in counters]
    # stdin holds one of them: the prompt then comes as an argument
    both = CliRunner().invoke(cli, ["run", "-", "--prediction", "-"], input=want)
    assert both.exit_code != 0 and isinstance(both.exception, ConfigError)
    missing = CliRunner().invoke(cli, [*args, "--prediction", str(tmp_path / "none.txt")])
    assert missing.exit_code != 0 and "--prediction" in str(missing.exception)


def test_bench_runs_a_suite_with_each_prompts_file_as_the_prediction() -> None:
    spec = _speculator()
    plain = spec.generate(PROMPT, drafter="none", max_tokens=40)
    # The fake answers a prompt whatever it says: its "file" is what it will write.
    prompts = [BenchPrompt("fake", 0, f"{PROMPT}\n```\n{plain}```")]
    prompts.append(BenchPrompt("fake", 1, "no file here"))
    configs = parse_configs("auto,auto:p=1")
    assert [c.label for c in configs] == ["none", "auto", "auto:p=1"]
    result = run_bench(spec, prompts, configs, repeats=1, max_tokens=40)
    assert result.complete and not result.failures
    edited, other = result.prompts
    assert edited.runs["auto:p=1"][0].accepted_prediction_tokens > 0
    assert edited.runs["auto"][0].accepted_prediction_tokens == 0
    assert other.runs["auto:p=1"][0].accepted_prediction_tokens == 0  # nothing to predict
    for bad in ("none:p=1", "auto:p=2"):
        with pytest.raises(ConfigError):
            parse_configs(bad)


class _Own:
    """A generation's own drafter (`auto`'s, or a fixed K's) offering one lookup."""

    def __init__(self, name: DrafterKind) -> None:
        self.name = name

    def offer(self, tokens: Sequence[int], room: int) -> list[Proposal]:
        return [Lookup((7, 8, 9), 8, "suffix")]


def test_auto_offers_its_own_lookups_first_a_fixed_k_the_predictions() -> None:
    """`auto`'s policy takes the first offered on a tie: its own copies, which make the edits
    it learned (the prediction's tokens do not); a fixed K takes the first: the prediction."""
    prediction = PredictionDrafter([1, 2, 3, 4])
    prediction.begin([5])
    own_first = WithPrediction(prediction, _Own(DrafterKind.AUTO))  # type: ignore[arg-type]
    assert [p.source for p in own_first.offer([5], 4)] == ["suffix", PREDICTION]
    fixed = WithPrediction(prediction, _Own(DrafterKind.NGRAM))  # type: ignore[arg-type]
    assert [p.source for p in fixed.offer([5], 4)] == [PREDICTION, "suffix"]
    spec = _speculator()
    for name, first in (("auto", True), ("ngram", False), ("model", False)):
        lookup = drafting.prediction_drafter([1, 2, 3], spec.target)
        built = drafting.predicted(spec.drafter(name), lookup)
        assert isinstance(built, WithPrediction) and built.own_first is first
