"""The sampler's processed distribution and the text stream helpers."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.text import StopMatcher, Utf8Stream
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
