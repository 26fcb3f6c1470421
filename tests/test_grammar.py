"""Constrained decoding on fake models through the real grammar engine (llguidance): greedy
output is plain constrained decoding's, token for token, with or without drafts; forbidden
draft tokens never reach the target; the grammar's forced text is drafted; sampled output
follows the constrained distribution exactly (chi-squared, with a failing control)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

import llguidance
import numpy as np
import pytest

from edgespec.engine import constraint as constraint_module
from edgespec.engine.constraint import Constrained
from edgespec.engine.drafters import GRAMMAR, Lookup, ModelDrafter, NgramDrafter, NoDrafter
from edgespec.engine.events import DoneEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.text.grammar import Grammar, GrammarError, unfinished
from tests.grammars import JSON_EOS, JSON_PIECES, GrammarModel
from tests.stats import FAIL_P, PASS_P, chi2_pvalue

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "boolean"}, "ab": {"type": "integer"}},
    "required": ["a", "ab"],
    "additionalProperties": False,
}
PROMPT = [5, 6, 7]


def run(
    target: GrammarModel, drafter: object, grammar: Grammar, config: GenerationConfig, k: int = 4
) -> tuple[list[int], DoneEvent]:
    session = Session(target)
    tokens: list[int] = []
    done = None
    takes = getattr(drafter, "name", "") != "none"
    constrained = Constrained(grammar.compile(target.grammar_tokenizer), takes)
    for event in session.generate(PROMPT, drafter, config, k, constrained):  # type: ignore[arg-type]
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return tokens, done


def allowed(grammar: Grammar, target: GrammarModel, prefix: Sequence[int]) -> list[int]:
    """The tokens the grammar allows after `prefix`, asked of a fresh matcher (not of the
    engine's incremental state)."""
    matcher = llguidance.LLMatcher(target.grammar_tokenizer, grammar.source, log_level=0)
    assert matcher.consume_tokens(list(prefix))
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), np.uint8), bitorder="little")
    return [int(t) for t in np.flatnonzero(bits[: target.n_vocab])]


def plain_constrained_greedy(target: GrammarModel, grammar: Grammar, n: int) -> list[int]:
    """The reference: argmax over the allowed tokens, one token at a time."""
    out: list[int] = []
    while len(out) < n:
        row = target.logits_for([*PROMPT, *out])
        ok = allowed(grammar, target, out)
        out.append(max(ok, key=lambda t: (row[t], -t)))
        if out[-1] == JSON_EOS:
            break
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("drafter_name", ["none", "ngram", "model"])
def test_greedy_output_is_plain_constrained_decoding(seed: int, drafter_name: str) -> None:
    target = GrammarModel(seed=seed, order=2, scale=2.0)
    draft = GrammarModel(seed=seed, order=2, scale=2.0, noise=1.0, noise_seed=seed + 50)
    drafter = {"none": NoDrafter(), "ngram": NgramDrafter(2, 1), "model": ModelDrafter(draft)}[
        drafter_name
    ]
    grammar = Grammar.json_schema(SCHEMA)
    config = GenerationConfig(max_tokens=40)
    tokens, done = run(target, drafter, grammar, config, k=0 if drafter_name == "none" else 4)
    assert tokens == plain_constrained_greedy(target, grammar, 40)
    if done.incomplete is None:  # a whole object within 40 tokens: valid against the schema
        doc = json.loads(target.text(tokens))
        assert set(doc) == {"a", "ab"} and isinstance(doc["a"], bool)
        assert isinstance(doc["ab"], int)


class Stubborn:
    """A drafter that always proposes the same tokens, whatever the grammar says."""

    name = "stubborn"

    def __init__(self, tokens: tuple[int, ...]) -> None:
        self.tokens = tokens

    def begin(self, tokens: Sequence[int]) -> None: ...

    def offer(self, tokens: Sequence[int], room: int) -> list[Lookup]:
        return [Lookup(self.tokens[:room], 4, self.name)]

    def commit(self, tokens: Sequence[int]) -> None: ...

    def end(self) -> None: ...


class Recording(GrammarModel):
    """A GrammarModel that keeps every batch it was asked to decode."""

    batches: list[list[int]]

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.batches = [*getattr(self, "batches", []), list(tokens)]
        return super().decode(tokens, n_logits)


def test_forbidden_draft_tokens_never_reach_the_target() -> None:
    target = Recording(seed=3)
    x = JSON_PIECES.index(b"x")  # never valid JSON here
    _, done = run(target, Stubborn((x, x, x)), Grammar.json_schema(SCHEMA), GenerationConfig())
    assert done.incomplete is None
    assert not any(x in batch for batch in target.batches)
    assert "stubborn" not in done.stats.by_drafter


def test_a_drafted_end_after_the_grammar_has_ended_leaves_it_whole() -> None:
    # `{"a": true}` ends this grammar: only the end of generation may follow, and llguidance
    # does not record taking it, so checking a draft of it must not roll back `}`.
    target = GrammarModel()
    grammar = Grammar.json_schema(
        {**SCHEMA, "properties": {"a": {"type": "boolean"}}, "required": ["a"]}
    )
    constraint = grammar.compile(target.grammar_tokenizer)
    text = [JSON_PIECES.index(p) for p in (b'{"a', b'"', b": ", b"true", b"}")]
    for token in text:
        constraint.advance(token)
    assert constraint.valid_prefix([JSON_EOS, JSON_EOS]) == 1
    assert constraint.incomplete() is None
    constraint.advance(JSON_EOS)
    assert constraint.incomplete() is None


def test_the_tokens_the_grammar_alone_allows_are_taken_without_a_pass() -> None:
    grammar = Grammar.json_schema(SCHEMA)
    target = Recording(seed=1)
    tokens, done = run(target, Stubborn(()), grammar, GenerationConfig(), k=8)
    forced = done.stats.by_drafter[GRAMMAR]
    # `{"a`, `"`, `: `, then `, `, `"`, `ab`, `"`, `: ` and the end are fixed by the schema
    assert forced.accepted >= 8
    passes = len(target.batches) - 1  # the first batch is the prompt
    assert passes == len(tokens) - forced.accepted
    # plain decoding asks the target for each of them, and writes the same tokens
    plain = Recording(seed=1)
    assert run(plain, NoDrafter(), grammar, GenerationConfig(), k=0)[0] == tokens
    assert len(plain.batches) - 1 == len(tokens)


def test_an_answer_cut_inside_its_grammar_says_so() -> None:
    target = GrammarModel(seed=2)
    _, done = run(target, NoDrafter(), Grammar.json_schema(SCHEMA), GenerationConfig(max_tokens=3))
    assert done.finish_reason == "length" and done.incomplete
    message = unfinished(done.incomplete, done.finish_reason, 3)
    assert message is not None and "--max-tokens (3)" in message


# --- sampling: the constrained distribution, exactly -----------------------------------------

# Sequences like "ab1", "a", "b", "2": several tokenizations of the same text.
SMALL = Grammar.gbnf("root ::= [ab]+ [12]")
STEPS = 3


def exact_constrained(target: GrammarModel, params: SamplingParams) -> dict[tuple[int, ...], float]:
    """The probability of every output of up to STEPS tokens under plain constrained sampling:
    mask, then the sampling policy, token by token."""
    sampler = Sampler(params)
    out: dict[tuple[int, ...], float] = {}

    def walk(prefix: tuple[int, ...], prob: float) -> None:
        if len(prefix) == STEPS or (prefix and prefix[-1] == JSON_EOS):
            out[prefix] = out.get(prefix, 0.0) + prob
            return
        row = target.logits_for([*PROMPT, *prefix]).astype(np.float64)
        ok = np.zeros(target.n_vocab, dtype=bool)
        ok[allowed(SMALL, target, prefix)] = True
        row[~ok] = -np.inf
        probs = sampler.probs(row)
        for t in np.flatnonzero(probs > 0):
            walk((*prefix, int(t)), prob * probs[t])

    walk((), 1.0)
    return out


def sampled_counts(params: SamplingParams, n: int, k: int = 3) -> Counter:  # type: ignore[type-arg]
    target = GrammarModel(seed=21, order=2, scale=1.5)
    draft = GrammarModel(seed=21, order=2, scale=1.5, noise=1.0, noise_seed=121)
    session = Session(target)
    drafter = ModelDrafter(draft, p_min=0.0)
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        sampling = SamplingParams(
            temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, seed=7000 + i
        )
        config = GenerationConfig(max_tokens=STEPS, sampling=sampling)
        constrained = Constrained(SMALL.compile(target.grammar_tokenizer))
        events = session.generate(PROMPT, drafter, config, k, constrained)
        counts[tuple(e.token for e in events if isinstance(e, TokenEvent))] += 1
    return counts


CONSTRAINED_PARAMS = {
    "t=1": SamplingParams(temperature=1.0),
    "t=0.7 top-p 0.9": SamplingParams(temperature=0.7, top_p=0.9),
}


@pytest.mark.parametrize("params", sorted(CONSTRAINED_PARAMS))
def test_sampled_output_follows_the_constrained_distribution(params: str) -> None:
    p = CONSTRAINED_PARAMS[params]
    exact = exact_constrained(GrammarModel(seed=21, order=2, scale=1.5), p)
    assert len(exact) > 5  # the grammar leaves real choices
    assert chi2_pvalue(sampled_counts(p, 1500), exact) > PASS_P


def mass_to_the_best(row: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Wrong: forbidden tokens' probability goes to the likeliest allowed token instead of
    being spread by renormalizing (what "take the best allowed token when the sample is
    forbidden" does)."""
    p = np.exp(row - row.max())
    p /= p.sum()
    best = int(np.argmax(np.where(ok, p, -1.0)))
    out = np.where(ok, p, 0.0)
    out[best] += p[~ok].sum()
    with np.errstate(divide="ignore"):
        return np.log(out)


def test_the_distribution_check_fails_a_wrong_constrained_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(constraint_module, "masked", mass_to_the_best)
    p = CONSTRAINED_PARAMS["t=1"]
    exact = exact_constrained(GrammarModel(seed=21, order=2, scale=1.5), p)
    assert chi2_pvalue(sampled_counts(p, 1500), exact) < FAIL_P


# --- grammars that cannot be used ----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Grammar.json_schema("{not json"), "not valid JSON"),
        (lambda: Grammar.json_schema("[1, 2]"), "must be an object"),
        (lambda: Grammar.json_schema({"type": "string", "format": "weird"}), "weird"),
        (lambda: Grammar.gbnf("root ::= undefined-rule"), "cannot be"),
        (lambda: Grammar.json_schema("[" * 100_000 + "]" * 100_000), "not valid JSON"),
    ],
)
def test_unusable_grammars_are_refused_with_the_reason(make: object, says: str) -> None:
    with pytest.raises(GrammarError, match=says):
        make()  # type: ignore[operator]


class Oracle(Stubborn):
    """A drafter that always offers the rest of a known answer (end of generation included)."""

    name = "oracle"

    def offer(self, tokens: Sequence[int], room: int) -> list[Lookup]:
        done = len(tokens) - len(PROMPT)
        return [Lookup(self.tokens[done : done + room], 4, self.name)]


def test_a_draft_accepted_through_the_end_of_generation_ends_the_answer() -> None:
    """Drafts that end with the end of generation, accepted whole: the target's token after
    it is never taken, and the finished grammar is not asked to follow it."""
    for seed in range(6):
        target = GrammarModel(seed=seed)
        grammar = Grammar.json_schema(SCHEMA)
        plain, _ = run(target, NoDrafter(), grammar, GenerationConfig(max_tokens=40), k=0)
        if plain[-1] != JSON_EOS:
            continue  # no whole answer within 40 tokens
        tokens, done = run(target, Oracle(tuple(plain)), grammar, GenerationConfig(max_tokens=40))
        assert tokens == plain and done.finish_reason == "stop"
