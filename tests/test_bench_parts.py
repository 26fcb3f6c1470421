"""Where the time outside llama.cpp's decodes goes, per generated token: the engine measures its
parts (drafting, verification, the grammar, streaming) and `bench` reports them with the
adapter's row handover and the rest."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest

from edgespec.api import Speculator
from edgespec.bench import output, report
from edgespec.bench.configs import parse_configs
from edgespec.bench.measure import PARTS
from edgespec.bench.runner import run_bench
from edgespec.engine.events import DoneEvent, GenerationStats, TokenEvent
from edgespec.engine.sampling import SamplingParams
from edgespec.text.grammar import Grammar
from tests.fakes import FakeTextModel
from tests.test_bench import PROMPTS, fake_speculator
from tests.test_bench_structured import SCHEMA, speculator


class TimedModel(FakeTextModel):
    """A fake that keeps the adapter's clocks: each decode counts 2 ms, of which handing the
    rows over is 0.5 ms (counted, not slept: the bench's split of them is then exact)."""

    def __init__(self, **kwargs: float) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.decode_s = self.logits_s = 0.0
        self.decodes = 0

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        rows = super().decode(tokens, n_logits)
        self.logits_s += 0.0005
        self.decode_s += 0.002
        self.decodes += 1
        return rows


def stats_of(spec_stream: object) -> GenerationStats:
    done = [e for e in spec_stream if isinstance(e, DoneEvent)]  # type: ignore[attr-defined]
    return done[0].stats


def test_the_engine_times_drafting_verification_and_streaming_apart() -> None:
    spec = fake_speculator()
    tokens = spec.prompt_tokens("abcabcabcabc")
    sampled = SamplingParams(temperature=0.8, seed=3)
    slept = 0
    stats: GenerationStats | None = None
    for event in spec.stream(tokens, drafter="model", k=3, max_tokens=12, sampling=sampled):
        if isinstance(event, TokenEvent):  # a consumer that takes its time with each token
            time.sleep(0.002)
            slept += 1
        elif isinstance(event, DoneEvent):
            stats = event.stats
    assert stats is not None and slept == stats.generated == 12
    assert stats.stream_s >= 0.002 * slept  # the consumer's time is streaming's
    assert stats.sample_s > 0 and stats.drafting_s > 0 and stats.grammar_s == 0
    # the parts lie within the rounds' draft and verification time, and the time after them
    assert stats.sample_s < stats.verify_s
    assert stats.drafting_s + stats.sample_s + stats.stream_s < stats.total_s


def test_a_grammars_work_is_its_own_part() -> None:
    spec = speculator()
    prompt = spec.prompt_tokens("answer")
    grammar = Grammar.json_schema(SCHEMA)
    stats = stats_of(spec.stream(prompt, drafter="model", k=3, max_tokens=30, grammar=grammar))
    assert stats.grammar_s > 0 and stats.sample_s == 0  # verification under it is the grammar's


def test_bench_reports_the_time_outside_llama_cpp_by_part() -> None:
    spec = Speculator(TimedModel(seed=2, n_ctx=256), FakeTextModel(seed=2, n_ctx=256, noise=1.0))
    configs = parse_configs("model:k=3")
    result = run_bench(spec, PROMPTS[:1], configs, repeats=2, max_tokens=10)
    runs = [m for ms in result.prompts[0].runs.values() for m in ms]
    for m in runs:
        assert list(m.parts_ms) == list(PARTS) and min(m.parts_ms.values()) >= 0
    # The target's rows: 0.5 ms of each decode, a decode per round (the prompt's too).
    plain = result.prompts[0].runs["none"][0]
    assert plain.parts_ms["logits"] == pytest.approx(0.5 * 11 / 10)
    rows = report.parts_rows(result)
    assert [r[:2] for r in rows] == [["fake", "none"], ["fake", "model:k=3"]]
    assert all(float(r[-1]) == pytest.approx(sum(map(float, r[2:-1])), abs=0.002) for r in rows)
    assert "by part" in output.markdown(result, {})
