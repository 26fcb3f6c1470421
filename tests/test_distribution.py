"""Sampling must be lossless: the tokens speculation emits follow the target's distribution
exactly. Checked with chi-squared goodness-of-fit tests on small vocabularies, with negative
controls (known-wrong verifiers) that the same tests must reject.

Seeds are fixed, so each test is deterministic; thresholds leave a wide margin both ways
(a correct verifier passes at p > 1e-4, a wrong one fails at p < 1e-6).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from edgespec.engine import generate as generate_module
from edgespec.engine import sampling as sampling_module
from edgespec.engine.drafters import HybridDrafter, ModelDrafter, NgramDrafter
from edgespec.engine.events import TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.sampling import Dist, Row, Sampler, SamplingParams
from edgespec.engine.verify import Draft, verify_sampled
from tests.fakes import FakeModel
from tests.stats import (
    FAIL_P,
    PASS_P,
    PROMPT,
    SEQ_PARAMS,
    STEPS,
    chi2_pvalue,
    exact_sequence_probs,
)

# --- single step: one draft token, the first emitted token must follow p ----------------

Verifier = Callable[[Draft, Callable[[int], np.ndarray], Sampler], tuple[int, int]]


def first_token_counts(
    p: np.ndarray, q: np.ndarray | None, verify: Verifier, n: int, seed: int, fixed: int = 0
) -> Counter:  # type: ignore[type-arg]
    sampler = Sampler(SamplingParams(temperature=1.0), np.random.default_rng(seed))
    bonus = np.full(len(p), 1 / len(p))
    rows = [p, bonus]
    counts: Counter = Counter()  # type: ignore[type-arg]
    for _ in range(n):
        if q is None:
            draft = Draft([fixed], None, "ngram")
        else:
            draft = Draft([sampler.draw(q)], [q], "model")
        accepted, nxt = verify(draft, rows.__getitem__, sampler)
        counts[draft.tokens[0] if accepted else nxt] += 1
    return counts


def dirichlet(seed: int, n: int = 6, zeros: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).dirichlet(np.ones(n))
    v[:zeros] = 0.0
    return v / v.sum()


SINGLE_STEP = {
    "random p, q": (dirichlet(1), dirichlet(2)),
    "disjoint supports": (np.array([0.5, 0.5, 0, 0, 0, 0]), np.array([0, 0, 0.2, 0.3, 0.5, 0])),
    "zeros in p": (dirichlet(3, zeros=2), dirichlet(4)),
    "zeros in q": (dirichlet(5), dirichlet(6, zeros=3)),
    "p equals q": (dirichlet(7), dirichlet(7)),
    "deterministic draft, likely token": (dirichlet(8), None),
    "deterministic draft, impossible token": (dirichlet(9, zeros=1), None),
}


def _probs(p: np.ndarray) -> dict[int, float]:
    return {i: float(x) for i, x in enumerate(p) if x > 0}


@pytest.mark.parametrize("case", sorted(SINGLE_STEP))
def test_single_step_matches_the_target(case: str) -> None:
    p, q = SINGLE_STEP[case]
    fixed = 0 if "impossible" in case else int(np.argmax(p))
    counts = first_token_counts(p, q, verify_sampled, 20000, seed=42, fixed=fixed)
    assert chi2_pvalue(counts, _probs(p)) > PASS_P


def resample_from_p(
    draft: Draft, rows: Callable[[int], np.ndarray], sampler: Sampler
) -> tuple[int, int]:
    """Wrong: on rejection draws from p instead of the residual max(0, p - q)."""
    for i, tok in enumerate(draft.tokens):
        p = rows(i)
        q = draft.q[i] if draft.q else None
        accept = p[tok] if q is None else min(1.0, p[tok] / q[tok])
        if sampler.rng.random() >= accept:
            return i, sampler.draw(p)
    return len(draft), sampler.draw(rows(len(draft)))


def accept_without_coin(
    draft: Draft, rows: Callable[[int], np.ndarray], sampler: Sampler
) -> tuple[int, int]:
    """Wrong: accepts whenever the target gives the token any probability."""
    for i, tok in enumerate(draft.tokens):
        p = rows(i)
        if p[tok] <= 0:
            residual = p.copy()
            residual[tok] = 0
            return i, sampler.draw(residual / residual.sum())
    return len(draft), sampler.draw(rows(len(draft)))


@pytest.mark.parametrize("wrong", [resample_from_p, accept_without_coin])
@pytest.mark.parametrize("case", ["random p, q", "deterministic draft, likely token"])
def test_single_step_negative_controls_fail(wrong: Verifier, case: str) -> None:
    p, q = SINGLE_STEP[case]
    counts = first_token_counts(p, q, wrong, 20000, seed=42, fixed=int(np.argmax(p)))
    assert chi2_pvalue(counts, _probs(p)) < FAIL_P


# --- short sequences through the whole engine ------------------------------------------


def sequence_counts(drafter_name: str, params: SamplingParams, n: int, k: int) -> Counter:  # type: ignore[type-arg]
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    draft = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, noise=1.0, noise_seed=5)
    session = Session(target)
    model = ModelDrafter(draft, p_min=0.0)
    drafter = {
        "model": model,
        "ngram": NgramDrafter(max_ngram=2, min_ngram=1),
        "hybrid": HybridDrafter(NgramDrafter(max_ngram=2, min_ngram=2), model),
    }[drafter_name]
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        config = GenerationConfig(
            max_tokens=STEPS,
            sampling=replace(params, seed=1000 + i),
        )
        seq = tuple(
            e.token
            for e in session.generate(PROMPT, drafter, config, k)
            if isinstance(e, TokenEvent)
        )
        counts[seq] += 1
    return counts


# Generations per check: 3,000 in the real tier; the fast tier's 1,000 still reject each wrong
# verifier below at p < 1e-15. (The tree checks in test_tree need all 3,000 for theirs.)
GENERATIONS = pytest.mark.parametrize(
    "n", [1000, pytest.param(3000, marks=pytest.mark.real)], ids=["fast", "full"]
)


@GENERATIONS
@pytest.mark.parametrize("params", sorted(SEQ_PARAMS))
@pytest.mark.parametrize("drafter", ["model", "ngram", "hybrid"])
def test_sequences_match_the_target(drafter: str, params: str, n: int) -> None:
    p = SEQ_PARAMS[params]
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    counts = sequence_counts(drafter, p, n, k=3)
    assert chi2_pvalue(counts, exact_sequence_probs(target, p)) > PASS_P


def bonus_from_wrong_row(
    draft: Draft, rows: Callable[[int], np.ndarray], sampler: Sampler
) -> tuple[int, int]:
    """Wrong: after a fully accepted draft, the bonus comes from the last draft row."""
    accepted, nxt = verify_sampled(draft, rows, sampler)
    if accepted == len(draft) and len(draft) > 0:
        return accepted, sampler.draw(rows(len(draft) - 1))
    return accepted, nxt


@GENERATIONS
@pytest.mark.parametrize("wrong", [resample_from_p, accept_without_coin, bonus_from_wrong_row])
def test_sequence_negative_controls_fail(
    wrong: Verifier, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generate_module, "verify_sampled", wrong)
    p = SEQ_PARAMS["t=1"]
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    counts = sequence_counts("model", p, n, k=3)
    assert chi2_pvalue(counts, exact_sequence_probs(target, p)) < FAIL_P


# --- a draft whose vocabulary differs in size from the target's ----------------------------


def mismatched_counts(n_target: int, n_draft: int, n: int) -> Counter:  # type: ignore[type-arg]
    target = FakeModel(n_vocab=n_target, order=1, scale=1.5, seed=31)
    draft = FakeModel(n_vocab=n_draft, order=1, scale=1.5, seed=32)
    session = Session(target)
    drafter = ModelDrafter(draft, p_min=0.0)
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        config = GenerationConfig(
            max_tokens=STEPS, sampling=SamplingParams(temperature=1.0, seed=5000 + i)
        )
        events = session.generate(PROMPT, drafter, config, 3)
        counts[tuple(e.token for e in events if isinstance(e, TokenEvent))] += 1
    return counts


@pytest.mark.parametrize(("n_target", "n_draft"), [(6, 4), (4, 6)])
def test_vocabularies_of_different_sizes_keep_the_target_distribution(
    n_target: int, n_draft: int
) -> None:
    # Like Qwen2.5 7B (152,064 tokens) drafted by 0.5B (151,936), and the other way round: the
    # target emits ids the draft lacks (never fed to it), the draft proposes ids the target
    # lacks (cut from the draft), and q is aligned to p.
    target = FakeModel(n_vocab=n_target, order=1, scale=1.5, seed=31)
    counts = mismatched_counts(n_target, n_draft, 4000)
    assert {t for seq in counts for t in seq} == set(range(n_target))
    assert (
        chi2_pvalue(counts, exact_sequence_probs(target, SamplingParams(temperature=1.0))) > PASS_P
    )


# --- a draft's proposal that leaves tokens out ------------------------------------------


def _proposal_counts(n: int, params: SamplingParams) -> tuple[Counter, int]:  # type: ignore[type-arg]
    """Sequences decoded with a draft model whose proposals leave out what `PROPOSAL_FLOOR`
    (raised by the caller) says, and how many proposals left a token out."""
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    draft = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, noise=1.0, noise_seed=5)
    session = Session(target)
    drafter = ModelDrafter(draft, p_min=0.0)
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        config = GenerationConfig(max_tokens=STEPS, sampling=replace(params, seed=7000 + i))
        events = session.generate(PROMPT, drafter, config, 3)
        counts[tuple(e.token for e in events if isinstance(e, TokenEvent))] += 1
    sampler = Sampler(params)
    rows = [draft.table[r] for r in range(len(draft.table))]
    cut = sum(len(sampler.proposal(r).support) < len(sampler.dist(r).support) for r in rows)
    return counts, cut


@GENERATIONS
@pytest.mark.parametrize("params", ["t=1", "t=1.3 top-p 0.8 min-p 0.05"])
def test_a_proposal_without_its_tail_keeps_the_target_distribution(
    params: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any distribution the draft draws from keeps verification exact, so long as the token is
    # checked against the same one: with the floor at 0.3, most rows' proposals drop tokens
    # that the target then reaches only through the residual.
    monkeypatch.setattr(sampling_module, "PROPOSAL_FLOOR", 0.3)
    p = SEQ_PARAMS[params]
    counts, cut = _proposal_counts(n, p)
    assert cut >= 4
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    assert chi2_pvalue(counts, exact_sequence_probs(target, p)) > PASS_P


@GENERATIONS
def test_a_token_drawn_from_the_proposal_but_checked_against_another_distribution_fails(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control: the draft draws from its proposal but hands verification the processed
    # distribution (the tail included) as the one it drew from.
    monkeypatch.setattr(sampling_module, "PROPOSAL_FLOOR", 0.3)
    proposal, draw = Sampler.proposal, Sampler.draw
    handed: dict[int, Dist] = {}

    def processed(self: Sampler, logits: np.ndarray) -> Dist:
        shown = self.dist(logits)
        handed[id(shown)] = proposal(self, logits)
        return shown

    def drawn(self: Sampler, probs: Row) -> int:
        return draw(self, handed.pop(id(probs), probs))

    monkeypatch.setattr(Sampler, "proposal", processed)
    monkeypatch.setattr(Sampler, "draw", drawn)
    p = SEQ_PARAMS["t=1"]
    counts, _ = _proposal_counts(n, p)
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    assert chi2_pvalue(counts, exact_sequence_probs(target, p)) < FAIL_P
