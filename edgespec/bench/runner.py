"""Running a benchmark: models loaded once, a warm-up, configurations interleaved per prompt
(A B C A B C ...) so that drift hits all alike, the baseline being the same engine with `none`."""

from __future__ import annotations

import json
import re
import statistics
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import Any

import numpy as np
import psutil

from edgespec.api import Speculator
from edgespec.bench.configs import BASELINE, BenchConfig
from edgespec.bench.suites import BenchPrompt
from edgespec.engine.drafters import GRAMMAR
from edgespec.engine.events import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError
from edgespec.options import DrafterKind
from edgespec.text.grammar import Grammar

try:  # a dev dependency: answers are checked against their schemas by it where installed
    import jsonschema
except ImportError:  # pragma: no cover - exercised by monkeypatching VALIDATOR
    jsonschema = None

# What checks a structured answer: the jsonschema library (independent of the grammar that
# constrained the answer), or where it is missing, the grammar's own acceptance of the whole
# text and Python's JSON parser.
VALIDATOR = "jsonschema" if jsonschema is not None else "grammar"

# A greedy divergence is excused only where the target's two best logits are this close:
# llama.cpp's batched and single-token kernels differ by up to ~0.65 here.
NEAR_TIE = 1.0


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
    # Drafting time outside llama.cpp per decode of the draft model, in ms (None: no draft
    # model steps): what the Python side of a draft step costs.
    draft_outside_ms: float | None = None
    # Time outside llama.cpp (both models' decodes excluded) per generated token, in ms,
    # from the end of the first round (prompt processing excluded) to the end.
    outside_ms_per_token: float | None = None
    # Structured output (a prompt with a schema): whether the answer is valid against it, and
    # the share of generated tokens that were the grammar's forced text, drafted and accepted.
    valid: bool | None = None
    grammar_share: float = 0.0
    # With a predicted output (`p=1`): its tokens drafted and accepted, drafted and rejected.
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    # Time outside llama.cpp's decodes per generated token, in ms, by part (`PARTS`; the whole
    # generation, prompt included: `other` holds the loop and the prompt's Python work).
    parts_ms: dict[str, float] = field(default_factory=dict)


# What the time outside llama.cpp's decodes goes to: the rows handed over by the adapter,
# verification (acceptance tests, the target's token), the drafters and the policy (the draft
# model's decodes left out), the grammar, the tokens' emission with what the consumer does
# with them, and the rest.
PARTS = ("logits", "sampling", "drafting", "grammar", "streaming", "other")


@dataclass(frozen=True)
class Divergence:
    position: int  # index of the first differing generated token
    baseline_token: int
    token: int
    logit_gap: float
    near_tie: bool


@dataclass
class PromptResult:
    prompt: BenchPrompt
    runs: dict[str, list[Measurement]] = field(default_factory=dict)
    divergences: dict[str, Divergence] = field(default_factory=dict)
    max_tokens: int | None = None  # the cap its runs had: the run's, or the prompt's if smaller
    # A prompt with a schema: plain decoding without the grammar, once per repeat (as many
    # tokens as the constrained baseline gave), to price the grammar's per-token overhead.
    free_runs: list[Measurement] = field(default_factory=list)

    def median(self, label: str, key: str = "tokens_per_s") -> float:
        return statistics.median(getattr(m, key) for m in self.runs[label])

    def speedup(self, label: str) -> float:
        base = self.median(BASELINE.label)
        return self.median(label) / base if base > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.prompt.suite,
            "index": self.prompt.index,
            "prompt": self.prompt.prompt,
            "max_tokens": self.max_tokens,
            "runs": {label: [asdict(m) for m in ms] for label, ms in self.runs.items()},
            "median_tokens_per_s": {label: self.median(label) for label in self.runs},
            "speedup": {label: self.speedup(label) for label in self.runs},
            "divergences": {label: asdict(d) for label, d in self.divergences.items()},
            "free_runs": [asdict(m) for m in self.free_runs],
        }


@dataclass
class BenchResult:
    configs: list[BenchConfig]
    prompts: list[PromptResult] = field(default_factory=list)
    complete: bool = False

    @property
    def failures(self) -> list[tuple[PromptResult, str, Divergence]]:
        return [
            (p, label, d)
            for p in self.prompts
            for label, d in p.divergences.items()
            if not d.near_tie
        ]


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


def check_configs(spec: Speculator, configs: Sequence[BenchConfig]) -> None:
    for config in configs:
        spec.drafter(config.spec)  # raises for a drafter this load cannot run


def _tokens(spec: Speculator, p: BenchPrompt, text: str) -> list[int]:
    t = spec.prompt_tokens(text, system=p.system)
    if len(t) >= spec.target.n_ctx - 1:
        raise ConfigError(
            f"suite {p.suite}, prompt {p.index + 1}: {len(t)} tokens do not fit the context "
            f"of {spec.target.n_ctx}; raise --ctx-size or shorten the prompt"
        )
    return t


def check_prompts(spec: Speculator, prompts: Sequence[BenchPrompt]) -> dict[int, list[int]]:
    """Tokenize every prompt up front; one that leaves no room to generate is an error. (A later
    turn of an editing session is known only once the turn before it has run.)"""
    tokens = {}
    for i, p in enumerate(prompts):
        if p.session is None:
            tokens[i] = _tokens(spec, p, p.prompt)
        elif p.file is not None:
            tokens[i] = _tokens(spec, p, p.edit_prompt(p.file))
    return tokens


def code_of(answer: str) -> str:
    """The first fenced code block of an answer (the whole answer when there is none)."""
    match = re.search(r"```[^\n]*\n(.*?)```", answer, re.DOTALL)
    return match.group(1) if match else answer


def prediction_of(prompt: BenchPrompt, file: str | None = None) -> str | None:
    """The predicted output a `p=1` configuration gives a prompt: the file it edits (a
    session's file as the turn before left it, else the prompt's first fenced code block);
    None for a prompt without one."""
    if file is not None:
        return file
    match = re.search(r"```[^\n]*\n(.*?)```", prompt.prompt, re.DOTALL)
    return match.group(1) if match else None


def _one_run(
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
    """One generation; under `grammar` when given, its answer checked against `schema`; with
    `prediction` as the predicted output where the configuration asks for one."""
    # Every run processes its prompt from scratch (TTFT stays comparable); a later turn drafts
    # from the session's earlier turns.
    spec.reset(history)
    learned = spec.auto_learned if config.drafter is DrafterKind.AUTO else None
    if learned is not None:
        learned.costs.accuracy.clear()
    draft_before = _draft_decodes(spec)
    clocks_before = _clocks(spec)
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
    return Measurement(
        s.tokens_per_s,
        s.generated,
        s.acceptance_rate,
        s.mean_accepted_length,
        s.draft_share,
        s.ttft_s,
        seen.peak_rss,
        seen.done.finish_reason,
        learned.costs.accuracy.median() if learned is not None else {},
        seen.trees / s.rounds if s.rounds else 0.0,
        _outside_ms(s.draft_s, draft_before, _draft_decodes(spec)),
        seen.outside_ms,
        None if schema is None else answer_valid("".join(seen.text), schema, seen.done),
        _grammar_share(s),
        s.accepted_prediction_tokens,
        s.rejected_prediction_tokens,
        _parts_ms(s, clocks_before, _clocks(spec)),
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
    """Time spent outside llama.cpp's decodes (both models') per token, from the end of the
    first round to the end of the generation: the first round's prompt work is left out."""

    def __init__(self, spec: Speculator) -> None:
        self.models = [m for m in (spec.target, spec.draft) if m is not None]
        self.start: tuple[float, float, int] | None = None  # clock, inside, tokens

    def inside(self) -> float:
        return sum(getattr(m, "decode_s", 0.0) for m in self.models)

    def mark(self, tokens: int) -> None:
        if self.start is None:
            self.start = (perf_counter(), self.inside(), tokens)

    def ms_per_token(self, tokens: int) -> float | None:
        if self.start is None or tokens <= self.start[2]:
            return None
        clock, inside, first = self.start
        outside = perf_counter() - clock - (self.inside() - inside)
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


def _draft_decodes(spec: Speculator) -> tuple[float, int]:
    """Seconds the draft model has spent inside llama.cpp's decode, and its decodes so far."""
    return getattr(spec.draft, "decode_s", 0.0), getattr(spec.draft, "decodes", 0)


def _clocks(spec: Speculator) -> tuple[float, float, float]:
    """Seconds inside both models' decodes, of those handing rows over, and the draft's."""
    models = [m for m in (spec.target, spec.draft) if m is not None]
    inside = sum(getattr(m, "decode_s", 0.0) for m in models)
    rows = sum(getattr(m, "logits_s", 0.0) for m in models)
    return inside, rows, getattr(spec.draft, "decode_s", 0.0)


def _parts_ms(
    s: GenerationStats, before: tuple[float, float, float], after: tuple[float, float, float]
) -> dict[str, float]:
    """Time outside llama.cpp's decodes per generated token, in ms, by part: the engine's own
    measures (GenerationStats) and the adapter's (`decode_s`, `logits_s`)."""
    if not s.generated:
        return {}
    inside, rows, draft = (a - b for a, b in zip(after, before, strict=True))
    parts = {
        "logits": rows,
        "sampling": s.sample_s,
        "drafting": max(0.0, s.drafting_s - draft),  # the draft model's decodes are inside
        "grammar": s.grammar_s,
        "streaming": s.stream_s,
    }
    outside = s.total_s - (inside - rows)
    parts["other"] = max(0.0, outside - sum(parts.values()))
    return {part: 1000 * seconds / s.generated for part, seconds in parts.items()}


def _outside_ms(
    draft_s: float, before: tuple[float, int], after: tuple[float, int]
) -> float | None:
    inside, decodes = after[0] - before[0], after[1] - before[1]
    return 1000 * max(0.0, draft_s - inside) / decodes if decodes else None


def _divergence(
    spec: Speculator,
    prompt: list[int],
    base: list[int],
    other: list[int],
    grammar: Grammar | None = None,
) -> Divergence | None:
    if other == base:
        return None
    i = next(
        (j for j, (a, b) in enumerate(zip(base, other, strict=False)) if a != b),
        min(len(base), len(other)),
    )
    if i >= min(len(base), len(other)):
        # One is a prefix of the other: they stopped at different places (EOG vs length).
        return Divergence(
            i,
            base[i] if i < len(base) else -1,
            other[i] if i < len(other) else -1,
            float("inf"),
            False,
        )
    spec.reset()
    logits = spec.target.decode([*prompt, *base[:i]], 1)[0]
    spec.reset()
    if grammar is not None:  # the tie is among the tokens the grammar allows there
        constraint = grammar.compile(spec.target.grammar_tokenizer)
        for token in base[:i]:
            constraint.advance(token)
        logits = np.where(constraint.mask(len(logits)), logits, -np.inf)
    return Divergence(i, base[i], other[i], *near_tie(logits, base[i], other[i]))


def near_tie(logits: np.ndarray, a: int, b: int) -> tuple[float, bool]:
    """The gap between two tokens' logits, and whether both are within NEAR_TIE of the best
    (three tokens can nearly tie, so the two need not be the top two)."""
    best = float(np.max(logits))
    gap = abs(float(logits[a] - logits[b]))
    return gap, best - min(float(logits[a]), float(logits[b])) < NEAR_TIE


@dataclass
class _Session:
    file: str  # the file as the last turn answered it
    docs: list[list[int]]  # each turn so far: its prompt and answer tokens


def _measure_prompt(
    spec: Speculator,
    entry: PromptResult,
    tokens: list[int],
    configs: Sequence[BenchConfig],
    repeats: int,
    max_tokens: int,
    sampling: SamplingParams,
    history: list[list[int]],
    on_run: Callable[[BenchPrompt, BenchConfig], None] | None,
    prediction: str | None = None,
) -> list[int]:
    """Every configuration, interleaved, `repeats` times; the baseline's output. A prompt with
    a schema is generated under it, and once a repeat also without it (`free_runs`)."""
    schema, grammar = entry.prompt.schema, entry.prompt.grammar
    outputs: dict[str, list[int]] = {}
    for _ in range(repeats):
        for config in configs:
            measurement, out = _one_run(
                spec,
                tokens,
                config,
                max_tokens,
                sampling,
                history,
                entry.prompt.prompt,
                schema,
                grammar,
                prediction,
            )
            entry.runs.setdefault(config.label, []).append(measurement)
            outputs.setdefault(config.label, out)
            if on_run:
                on_run(entry.prompt, config)
        if grammar is not None:
            # As many tokens as the constrained answer: the same work but for the grammar.
            free_cap = max(1, entry.runs[BASELINE.label][0].generated)
            entry.free_runs.append(_one_run(spec, tokens, BASELINE, free_cap, sampling)[0])
    if sampling.greedy:
        for label, out in outputs.items():
            div = _divergence(spec, tokens, outputs[BASELINE.label], out, grammar)
            if div is not None:
                entry.divergences[label] = div
    return outputs[BASELINE.label]


def run_bench(
    spec: Speculator,
    prompts: Sequence[BenchPrompt],
    configs: Sequence[BenchConfig],
    *,
    repeats: int = 3,
    max_tokens: int = 128,
    sampling: SamplingParams | None = None,
    on_run: Callable[[BenchPrompt, BenchConfig], None] | None = None,
    result: BenchResult | None = None,
) -> BenchResult:
    """Fills `result` as it goes, so whatever was measured survives an interruption."""
    if repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {repeats}")
    sampling = sampling or SamplingParams()
    check_configs(spec, configs)
    tokens = check_prompts(spec, prompts)
    result = result if result is not None else BenchResult(list(configs))
    # Warm-up: first-use allocations and caches, not measured.
    _one_run(spec, tokens[0], BASELINE, min(8, max_tokens), sampling)
    sessions: dict[int, _Session] = {}
    for i, prompt in enumerate(prompts):
        history: list[list[int]] = []
        file = prompt.file
        if prompt.session is not None and prompt.turn > 0:
            # A later turn edits what the turn before it answered; the earlier turns are in
            # the session (auto's suffix memory), as for a user editing one file turn by turn.
            earlier = sessions[prompt.session]
            tokens[i] = _tokens(spec, prompt, prompt.edit_prompt(earlier.file))
            history, file = earlier.docs, earlier.file
        # The run's cap holds for every prompt: a report of one cap must not measure another.
        cap = min(prompt.max_tokens or max_tokens, max_tokens)
        entry = PromptResult(prompt, max_tokens=cap)
        result.prompts.append(entry)
        base = _measure_prompt(
            spec,
            entry,
            tokens[i],
            configs,
            repeats,
            cap,
            sampling,
            history,
            on_run,
            prediction_of(prompt, file),
        )
        if prompt.session is not None:
            answer = spec.target.detokenize(base)
            sessions[prompt.session] = _Session(code_of(answer), [*history, tokens[i] + base])
    result.complete = True
    return result
