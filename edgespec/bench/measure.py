"""One generation of a benchmark, measured: speed, acceptance, memory, and where the time
outside llama.cpp goes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, NamedTuple

import psutil

from edgespec.api import Speculator
from edgespec.bench.configs import BenchConfig
from edgespec.engine.drafters import GRAMMAR
from edgespec.engine.events import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.engine.sampling import SamplingParams
from edgespec.options import DrafterKind
from edgespec.text.grammar import Grammar

try:  # a dev dependency: answers are checked against their schemas by it where installed
    import jsonschema
except ImportError:  # pragma: no cover - exercised by monkeypatching VALIDATOR
    jsonschema = None

# What checks a structured answer: jsonschema (independent of the grammar that constrained
# it), else the grammar's acceptance of the whole text and Python's JSON parser.
VALIDATOR = "jsonschema" if jsonschema is not None else "grammar"

# The time outside llama.cpp's decodes: the adapter's rows, verification, drafters and policy
# (draft decodes excluded), the grammar, emitting tokens to the consumer, and the rest.
PARTS = ("logits", "sampling", "drafting", "grammar", "streaming", "other")


@dataclass(frozen=True)
class Measurement:
    tokens_per_s: float
    generated: int
    acceptance_rate: float
    mean_accepted_length: float
    draft_share: float
    ttft_s: float
    peak_rss: int
    finish_reason: str
    # auto only: median |predicted - measured| / measured round time, per kind of round
    round_time_error: dict[str, float] = field(default_factory=dict)
    tree_share: float = 0.0  # rounds that verified a tree draft
    # The Python side of a draft-model step, in ms (None: no draft-model steps).
    draft_outside_ms: float | None = None
    # Time outside both models' decodes per generated token, in ms, after the first round.
    outside_ms_per_token: float | None = None
    # With a schema: whether the answer is valid, and the share of generated tokens that were
    # the grammar's forced text, drafted and accepted.
    valid: bool | None = None
    grammar_share: float = 0.0
    # With a predicted output (`p=1`): its tokens accepted and rejected.
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    # Time outside llama.cpp's decodes per generated token, in ms, by part (`PARTS`), over
    # the whole generation.
    parts_ms: dict[str, float] = field(default_factory=dict)


class _PeakRss:
    """Samples the process's resident memory while a run goes on."""

    def __init__(self, interval: float = 0.05) -> None:
        self.process = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def one_run(
    spec: Speculator,
    tokens: list[int],
    config: BenchConfig,
    max_tokens: int,
    sampling: SamplingParams,
    history: Sequence[list[int]] = (),
    instruction: str = "",
    schema: dict[str, Any] | None = None,
    grammar: Grammar | None = None,
    prediction: str | None = None,
) -> tuple[Measurement, list[int]]:
    """One generation and its tokens; under `grammar` when given, its answer checked against
    `schema`; with `prediction` as the predicted output where the configuration asks for one."""
    # The prompt is processed from scratch every run (TTFT stays comparable); a later turn
    # drafts from the session's earlier turns.
    spec.reset(history)
    learned = spec.auto_learned if config.drafter is DrafterKind.AUTO else None
    if learned is not None:
        learned.costs.accuracy.clear()
    before = _Clocks.of(spec)
    events = spec.stream(
        tokens,
        drafter=config.spec,
        k=config.k,
        max_tokens=max_tokens,
        sampling=sampling,
        instruction=instruction,
        grammar=grammar,
        tree_width=config.width,
        prediction=prediction if config.predict else None,
    )
    seen = _consume(spec, events)
    s = seen.done.stats
    spent = _Clocks.of(spec).since(before)
    return Measurement(
        tokens_per_s=s.tokens_per_s,
        generated=s.generated,
        acceptance_rate=s.acceptance_rate,
        mean_accepted_length=s.mean_accepted_length,
        draft_share=s.draft_share,
        ttft_s=s.ttft_s,
        peak_rss=seen.peak_rss,
        finish_reason=seen.done.finish_reason,
        round_time_error=learned.costs.accuracy.median() if learned is not None else {},
        tree_share=seen.trees / s.rounds if s.rounds else 0.0,
        draft_outside_ms=(
            1000 * max(0.0, s.draft_s - spent.draft) / spent.draft_decodes
            if spent.draft_decodes
            else None
        ),
        outside_ms_per_token=seen.outside_ms,
        valid=None if schema is None else answer_valid("".join(seen.text), schema, seen.done),
        grammar_share=_grammar_share(s),
        accepted_prediction_tokens=s.accepted_prediction_tokens,
        rejected_prediction_tokens=s.rejected_prediction_tokens,
        parts_ms=_parts_ms(s, spent),
    ), seen.out


@dataclass
class _Seen:
    """What a consumer of one generation's events saw."""

    done: DoneEvent
    out: list[int]
    text: list[str]
    trees: int
    outside_ms: float | None
    peak_rss: int


class _Outside:
    """Time outside both models' decodes per token, from the end of the first round (its
    prompt work left out) to the end of the generation."""

    def __init__(self, spec: Speculator) -> None:
        self.spec = spec
        self.start: tuple[float, float, int] | None = None  # clock, inside, tokens

    def mark(self, tokens: int) -> None:
        if self.start is None:
            self.start = (perf_counter(), _Clocks.of(self.spec).inside, tokens)

    def ms_per_token(self, tokens: int) -> float | None:
        if self.start is None or tokens <= self.start[2]:
            return None
        clock, inside, first = self.start
        outside = perf_counter() - clock - (_Clocks.of(self.spec).inside - inside)
        return 1000 * max(0.0, outside) / (tokens - first)


def _consume(spec: Speculator, events: Iterator[Event]) -> _Seen:
    out: list[int] = []
    text: list[str] = []
    trees = 0
    outside = _Outside(spec)
    done: DoneEvent | None = None
    ms: float | None = None
    with _PeakRss() as rss:
        for event in events:
            if isinstance(event, TokenEvent):
                out.append(event.token)
                text.append(event.text)
            elif isinstance(event, RoundEvent):
                trees += event.tree is not None
                outside.mark(len(out))
            elif isinstance(event, DoneEvent):
                done, ms = event, outside.ms_per_token(len(out))
    assert done is not None
    return _Seen(done, out, text, trees, ms, rss.peak)


def answer_valid(text: str, schema: dict[str, Any], done: DoneEvent) -> bool:
    """Whether a structured answer is whole and valid against its schema (`VALIDATOR`)."""
    if done.incomplete is not None:
        return False
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    if VALIDATOR == "grammar":
        return True  # the grammar accepted all of it, and it is JSON
    return bool(jsonschema.Draft202012Validator(schema).is_valid(doc))


def _grammar_share(s: GenerationStats) -> float:
    """Generated tokens that were the grammar's forced text, drafted and accepted."""
    counts = s.by_drafter.get(GRAMMAR)
    return counts.accepted / s.generated if counts is not None and s.generated else 0.0


class _Clocks(NamedTuple):
    """The adapters' counters (models without them count 0): seconds inside both models'
    decodes, of those handing rows over, the draft's seconds inside its decodes, its decodes."""

    inside: float
    rows: float
    draft: float
    draft_decodes: int

    @classmethod
    def of(cls, spec: Speculator) -> _Clocks:
        models = [m for m in (spec.target, spec.draft) if m is not None]
        return cls(
            sum(getattr(m, "decode_s", 0.0) for m in models),
            sum(getattr(m, "logits_s", 0.0) for m in models),
            getattr(spec.draft, "decode_s", 0.0),
            getattr(spec.draft, "decodes", 0),
        )

    def since(self, before: _Clocks) -> _Clocks:
        return _Clocks(
            self.inside - before.inside,
            self.rows - before.rows,
            self.draft - before.draft,
            self.draft_decodes - before.draft_decodes,
        )


def _parts_ms(s: GenerationStats, spent: _Clocks) -> dict[str, float]:
    """Time outside llama.cpp's decodes per generated token, in ms, by part: the engine's own
    measures (GenerationStats) and the adapter's (`decode_s`, `logits_s`)."""
    if not s.generated:
        return {}
    parts = {
        "logits": spent.rows,
        "sampling": s.sample_s,
        "drafting": max(0.0, s.drafting_s - spent.draft),  # the draft model's decodes are inside
        "grammar": s.grammar_s,
        "streaming": s.stream_s,
    }
    outside = s.total_s - (spent.inside - spent.rows)
    parts["other"] = max(0.0, outside - sum(parts.values()))
    return {part: 1000 * seconds / s.generated for part, seconds in parts.items()}
