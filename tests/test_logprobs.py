"""True logprobs on fake models: every returned token's log-probability and top alternatives
are the log-softmax of the target's raw logits at that token's position, whichever round made
it (chain, tree, grammar-forced, greedy or sampled), so speculation reports what plain
decoding reports."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from edgespec.api import Speculator
from edgespec.cli import loading
from edgespec.engine.constraint import Constrained
from edgespec.engine.drafters import GRAMMAR, NoDrafter
from edgespec.engine.events import Event, RoundEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.logprobs import logprobs_of
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError
from edgespec.text.grammar import Grammar
from tests.conftest import edgespec_here
from tests.fakes import FakeModel, FakeTextModel, TreeAlways, pair
from tests.grammars import GrammarModel
from tests.test_engine import PROMPT, make_drafter
from tests.test_grammar import SCHEMA, Stubborn
from tests.test_tree import UNIGRAMS

TOP = 3


def reference(row: np.ndarray, top: int) -> tuple[np.ndarray, list[int]]:
    """The log-softmax of a row in float64, and its `top` ids by (logprob desc, id asc)."""
    x = row.astype(np.float64)
    logp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
    order = sorted(range(len(x)), key=lambda i: (-logp[i], i))
    return logp, order[:top]


def check_tokens(target: FakeModel, prompt: Sequence[int], events: list[Event], top: int) -> int:
    """Each TokenEvent against the target's own row for its position; returns how many."""
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    for i, event in enumerate(tokens):
        logp, best = reference(target.logits_for([*prompt, *(e.token for e in tokens[:i])]), top)
        assert event.logprob == pytest.approx(logp[event.token], abs=1e-6)
        assert [t for t, _ in event.top_logprobs] == best
        assert [v for _, v in event.top_logprobs] == pytest.approx(logp[best], abs=1e-6)
    return len(tokens)


def test_a_row_s_logprobs_are_its_log_softmax_with_the_likeliest_first() -> None:
    # Logits far from 0 (a naive exp overflows float32) and a tie (the lower id first).
    row = np.array([1000.0, 1003.0, 998.5, 1003.0, 1001.0, -50.0], dtype=np.float32)
    (scored,) = logprobs_of(row[None, :], [2], 4)
    logp, best = reference(row, 4)
    assert best == [1, 3, 4, 0]
    assert scored.logprob == pytest.approx(logp[2], abs=1e-6)
    assert [t for t, _ in scored.top] == best
    assert [v for _, v in scored.top] == pytest.approx(logp[best], abs=1e-6)
    assert logprobs_of(row[None, :], [2], 0)[0].top == ()
    assert [t for t, _ in logprobs_of(row[None, :], [0], 10)[0].top] == [1, 3, 4, 0, 2, 5]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", ["none", "model", "ngram", "hybrid", "suffix"])
def test_every_token_s_logprob_is_the_target_s_at_its_position(
    name: str, temperature: float
) -> None:
    target, draft = pair(seed=4)
    sampling = SamplingParams(temperature=temperature, top_p=0.9, seed=5)
    config = GenerationConfig(max_tokens=60, sampling=sampling, logprobs=TOP)
    k = 0 if name == "none" else 5
    events = list(Session(target).generate(PROMPT, make_drafter(name, draft), config, k))
    assert check_tokens(target, PROMPT, events, TOP) == 60
    if name != "none":
        assert any(isinstance(e, TokenEvent) and e.from_draft for e in events)


def test_greedy_speculation_reports_plain_decoding_s_logprobs() -> None:
    target, draft = pair(seed=2)
    config = GenerationConfig(max_tokens=50, logprobs=5)

    def scored(drafter: object, k: int) -> list[tuple[int, float | None, tuple]]:  # type: ignore[type-arg]
        events = Session(target).generate(PROMPT, drafter, config, k)  # type: ignore[arg-type]
        return [(e.token, e.logprob, e.top_logprobs) for e in events if isinstance(e, TokenEvent)]

    assert scored(make_drafter("model", draft), 6) == scored(NoDrafter(), 0)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_tree_rounds_report_each_path_token_s_row(temperature: float) -> None:
    from edgespec.auto.suffix import SuffixDrafter

    target = FakeModel(n_vocab=6, order=2, scale=2.0, seed=1, tree_width=4)
    policy = TreeAlways(4, 10, 4)
    sampling = SamplingParams(temperature=temperature, seed=3)
    config = GenerationConfig(max_tokens=80, sampling=sampling, logprobs=TOP)
    events = list(Session(target).generate(PROMPT, SuffixDrafter(UNIGRAMS), config, policy))
    trees = [e for e in events if isinstance(e, RoundEvent) and e.tree is not None]
    assert any(r.accepted for r in trees), "no tree token accepted: the test would prove nothing"
    assert check_tokens(target, PROMPT, events, TOP) == 80


def grammar_events(target: GrammarModel, config: GenerationConfig) -> list[Event]:
    constrained = Constrained(Grammar.json_schema(SCHEMA).compile(target.grammar_tokenizer))
    return list(Session(target).generate([5, 6, 7], Stubborn(()), config, 8, constrained))


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_grammar_forced_tokens_get_the_raw_model_s_logprobs(temperature: float) -> None:
    target = GrammarModel(seed=1)
    sampling = SamplingParams(temperature=temperature, seed=8)
    events = grammar_events(target, GenerationConfig(sampling=sampling, logprobs=TOP))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert sum(r.forced for r in rounds) >= 8
    # The answer's end is forced too: those tokens are read from a pass of their own.
    assert rounds[-1].drafter == GRAMMAR and rounds[-1].forced and rounds[-1].target_token is None
    assert check_tokens(target, [5, 6, 7], events, TOP) >= 9


def test_forced_tokens_cut_by_max_tokens_get_logprobs() -> None:
    target = GrammarModel(seed=1)
    events = grammar_events(target, GenerationConfig(max_tokens=2, logprobs=1))
    assert [e.forced for e in events if isinstance(e, RoundEvent)] == [2]
    assert check_tokens(target, [5, 6, 7], events, 1) == 2


class Rows(FakeModel):
    """A FakeModel that records how many rows each pass asked for."""

    rows: list[int]

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.rows = [*getattr(self, "rows", []), n_logits]
        return super().decode(tokens, n_logits)


def test_without_logprobs_nothing_is_computed_or_read() -> None:
    target, draft = pair(seed=3)
    target = Rows(seed=3)
    events = list(Session(target).generate(PROMPT, make_drafter("model", draft), None, 5))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert all(e.logprob is None and e.top_logprobs == () for e in tokens)
    drafted = [e.drafted for e in events if isinstance(e, RoundEvent)]
    assert target.rows[1:] == [d + 1 for d in drafted]  # the rows verification needs, no more


def test_logprobs_are_asked_for_by_name_and_never_negative() -> None:
    with pytest.raises(TypeError):
        GenerationConfig(10, (), SamplingParams(), 3)  # type: ignore[misc]
    with pytest.raises(ConfigError) as err:
        GenerationConfig(logprobs=-1)
    assert err.value.field == "logprobs"
    assert GenerationConfig(logprobs=0).logprobs == 0


def test_run_json_carries_them_when_asked(
    isolated: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = FakeTextModel(seed=4)
    monkeypatch.setattr(loading, "load", lambda options, drafting: Speculator(target, None))
    asked = ("run", "abcabc", "--raw", "--json", "-n", "6", "-d", "ngram")
    res = edgespec_here(*asked, "--logprobs", "2", env=isolated)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    tokens = [d for d in lines if d["type"] == "token"]
    prompt = target.tokenize("abcabc")
    for i, doc in enumerate(tokens):
        logp, best = reference(target.logits_for([*prompt, *(d["token"] for d in tokens[:i])]), 2)
        assert doc["logprob"] == pytest.approx(logp[doc["token"]], abs=1e-6)
        assert [a["token"] for a in doc["top_logprobs"]] == best
    plain = edgespec_here(*asked, env=isolated)
    assert plain.returncode == 0 and "logprob" not in plain.stdout
    res = edgespec_here("run", "abc", "--logprobs", "2", env=isolated)
    assert res.returncode == 1 and "--json" in res.stderr
    res = edgespec_here("run", "abc", "--json", "--logprobs", "21", env=isolated)
    assert res.returncode != 0 and "--logprobs" in res.stderr
