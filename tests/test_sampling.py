"""The sampler's processed distribution (and its shortcuts: a distribution that knows its
support, draws and residuals on it, exactly what the whole row draws) and the text stream
helpers."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.engine.sampling import Sampler, SamplingParams, support_of
from edgespec.engine.text import StopMatcher, Utf8Stream
from edgespec.engine.verify import after_rejection
from edgespec.errors import ConfigError

LOGITS = np.log(np.array([0.05, 0.4, 0.3, 0.15, 0.1]))


def probs(**kw: float) -> np.ndarray:
    return Sampler(SamplingParams(**kw)).probs(LOGITS)  # type: ignore[arg-type]


def test_temperature_one_is_softmax() -> None:
    np.testing.assert_allclose(probs(temperature=1.0), [0.05, 0.4, 0.3, 0.15, 0.1])


def test_greedy_is_argmax_with_first_index_on_ties() -> None:
    assert probs(temperature=0.0).tolist() == [0, 1, 0, 0, 0]
    tie = Sampler(SamplingParams()).probs(np.array([1.0, 3.0, 3.0]))
    assert tie.tolist() == [0, 1, 0]


def test_top_k_top_p_min_p() -> None:
    np.testing.assert_allclose(probs(temperature=1.0, top_k=2), [0, 0.4 / 0.7, 0.3 / 0.7, 0, 0])
    # top-p 0.8: 0.4 + 0.3 = 0.7 < 0.8, so 0.15 joins (0.85 >= 0.8).
    np.testing.assert_allclose(
        probs(temperature=1.0, top_p=0.8), [0, 0.4, 0.3, 0.15, 0] / np.float64(0.85)
    )
    # min-p 0.3: keep tokens with p >= 0.3 * 0.4 = 0.12.
    np.testing.assert_allclose(
        probs(temperature=1.0, min_p=0.3), [0, 0.4, 0.3, 0.15, 0] / np.float64(0.85)
    )


def test_low_temperature_sharpens() -> None:
    assert probs(temperature=0.5)[1] > 0.4 > probs(temperature=2.0)[1]


def test_draws_follow_the_distribution_and_the_seed() -> None:
    p = probs(temperature=1.0)
    a = Sampler(SamplingParams(temperature=1.0, seed=5))
    b = Sampler(SamplingParams(temperature=1.0, seed=5))
    draws = [a.draw(p) for _ in range(20000)]
    assert draws[:50] == [b.draw(p) for _ in range(50)]
    freq = np.bincount(draws, minlength=5) / len(draws)
    np.testing.assert_allclose(freq, p, atol=0.015)


def test_a_draw_over_the_support_is_the_whole_rows_inverse_cdf() -> None:
    """Summing only the nonzero entries must not change which token a uniform number picks
    (seeded texts stay as they were), and a token of probability 0 is never drawn."""
    rng = np.random.default_rng(3)
    for seed in range(40):
        p = rng.random(2000) * (rng.random(2000) < 0.01)
        p[0] = 0.0
        p[-1] = 0.0
        p /= p.sum()
        sampler = Sampler(SamplingParams(temperature=1.0, seed=seed))
        whole_row = np.random.default_rng(seed)
        for _ in range(50):
            cdf = np.cumsum(p)
            expected = int(np.searchsorted(cdf, whole_row.random() * cdf[-1], side="right"))
            drawn = sampler.draw(p)
            assert drawn == expected and p[drawn] > 0


@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.1},
        {"min_p": 1.0},
        {"top_k": -1},
        {"temperature": float("nan")},
    ],
)
def test_invalid_values_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        SamplingParams(**kw)  # type: ignore[arg-type]


def test_stop_strings_are_held_back_and_never_shown() -> None:
    m = StopMatcher(["</end>", "STOP"])
    shown = [m.feed(piece) for piece in ["hello </", "en", "d> world"]]
    assert shown == [("hello ", False), ("", False), ("", True)]
    m = StopMatcher(["</end>"])
    assert m.feed("a </e")[0] == "a " and m.feed("x")[0] == "</ex" and m.flush() == ""
    m = StopMatcher(["ab"])
    assert m.feed("xa") == ("x", False) and m.flush() == "a"


def test_utf8_stream_waits_for_whole_characters() -> None:
    s = Utf8Stream()
    data = "é🎉".encode()
    assert [s.feed(data[i : i + 1]) for i in range(len(data))] == ["", "é", "", "", "", "🎉"]
    assert s.feed(b"\xc3") == "" and s.flush() == "\ufffd"


def sorted_reference(params: SamplingParams, logits: np.ndarray) -> np.ndarray:
    """The processed distribution by its definition: every token sorted by logit (ties by
    token id), top-k, then the top-p and min-p cut-offs on that order."""
    scaled = logits.astype(np.float64) / params.temperature
    idx = np.lexsort((np.arange(len(scaled)), -scaled))
    if params.top_k:
        idx = idx[: params.top_k]
    p = np.exp(scaled[idx] - scaled[idx[0]])
    p /= p.sum()
    keep = len(p)
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(p), params.top_p * (1 - 1e-12))) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(p >= params.min_p * p[0])))
    out = np.zeros(len(scaled))
    out[idx[:keep]] = p[:keep]
    return out / out.sum()


@pytest.mark.parametrize("spread", [0.5, 3.0, 12.0])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.7),
        SamplingParams(temperature=0.7, top_p=0.95),
        SamplingParams(temperature=1.0, top_p=0.5, min_p=0.05),
        SamplingParams(temperature=0.8, top_k=40, top_p=0.9),
        SamplingParams(temperature=1.3, min_p=0.1),
    ],
)
def test_large_vocabularies_keep_exactly_the_tokens_the_definition_keeps(
    params: SamplingParams, spread: float
) -> None:
    # Flat and peaked rows of a 152k vocabulary, rounded so that many logits tie (at the
    # top-p cut too): the sampler sorts only the likeliest tokens where it can.
    rng = np.random.default_rng(int(spread * 10))
    logits = np.round(rng.normal(0.0, spread, 151_936), 1).astype(np.float32)
    got, want = Sampler(params).probs(logits), sorted_reference(params, logits)
    assert np.array_equal(got > 0, want > 0)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)


def test_a_proposal_leaves_out_the_far_tail_and_cuts_top_p_on_what_is_left() -> None:
    # Weights relative to the likeliest: 1, 0.5, 0.25, 1e-3, 1e-5 (under the floor).
    logits = np.log(np.array([1.0, 0.5, 0.25, 1e-3, 1e-5]))
    sampler = Sampler(SamplingParams(temperature=1.0))
    q = sampler.proposal(logits)
    assert q.support.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(q.values, [1.0, 0.5, 0.25, 1e-3] / np.float64(1.751))
    # top-p 0.6 of the four tokens' mass: 1 < 0.6 * 1.751 = 1.05, 1 + 0.5 reaches it.
    q = Sampler(SamplingParams(temperature=1.0, top_p=0.6)).proposal(logits)
    assert q.support.tolist() == [0, 1]
    np.testing.assert_allclose(q.values, [1.0, 0.5] / np.float64(1.5))
    assert q.values.sum() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.7, top_p=0.95),
        SamplingParams(temperature=1.0, top_p=0.5, min_p=0.05),
        SamplingParams(temperature=0.8, top_k=40, top_p=0.9),
        SamplingParams(temperature=0.0),
    ],
)
def test_a_proposal_is_the_processed_distribution_where_the_tail_holds_nothing(
    params: SamplingParams,
) -> None:
    # A peaked row of a 152k vocabulary: what lies under the floor weighs less than 1e-9 of it.
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 1.0, 151_936).astype(np.float32)
    logits[rng.choice(151_936, 6, replace=False)] += np.array([40, 39, 38.5, 37, 36, 35])
    sampler = Sampler(params)
    q, p = sampler.proposal(logits), sampler.dist(logits)
    assert np.array_equal(q.support, p.support)
    np.testing.assert_allclose(q.values, p.values, rtol=1e-9)


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
