"""Running a benchmark: models loaded once, a warm-up, configurations interleaved per prompt
(A B C A B C ...) so that drift hits all alike, the baseline being the same engine with `none`,
and every greedy output compared with the baseline's."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from edgespec.api import Speculator
from edgespec.bench.configs import BASELINE, BenchConfig
from edgespec.bench.measure import Measurement, one_run
from edgespec.bench.suites import BenchPrompt
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError
from edgespec.text.grammar import Grammar

# A greedy divergence is excused only where the target's two best logits are this close: a guess
# above what llama.cpp's batched and single-token kernels differ by (docs/tuning.md, Near ties).
NEAR_TIE = 1.0
FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)  # a fenced code block; group 1: its code


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
    # With a schema: plain decoding without the grammar, once per repeat, as many tokens as
    # the constrained baseline gave: what the grammar costs per token.
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
    match = FENCED.search(answer)
    return match.group(1) if match else answer


def prediction_of(prompt: BenchPrompt, file: str | None = None) -> str | None:
    """The predicted output a `p=1` configuration gives a prompt: the file it edits (a
    session's file as the turn before left it, else the prompt's first fenced code block);
    None for a prompt without one."""
    if file is not None:
        return file
    match = FENCED.search(prompt.prompt)
    return match.group(1) if match else None


def _divergence(
    spec: Speculator,
    prompt: list[int],
    base: list[int],
    other: list[int],
    grammar: Grammar | None = None,
) -> Divergence | None:
    if other == base:
        return None
    shorter = min(len(base), len(other))
    i = next((j for j in range(shorter) if base[j] != other[j]), shorter)
    if i == shorter:  # one is a prefix of the other: they stopped at different places
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
            measurement, out = one_run(
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
            free_cap = max(1, entry.runs[BASELINE.label][0].generated)
            entry.free_runs.append(one_run(spec, tokens, BASELINE, free_cap, sampling)[0])
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
    for config in configs:
        spec.drafter(config.spec)  # raises for a drafter this load cannot run
    tokens = check_prompts(spec, prompts)
    result = result if result is not None else BenchResult(list(configs))
    # Warm-up: first-use allocations and caches, not measured.
    one_run(spec, tokens[0], BASELINE, min(8, max_tokens), sampling)
    sessions: dict[int, _Session] = {}
    for i, prompt in enumerate(prompts):
        history: list[list[int]] = []
        file = prompt.file
        if prompt.session is not None and prompt.turn > 0:
            # A later turn edits what the turn before it answered, with the earlier turns in
            # the session (auto's suffix memory), as a user editing one file turn by turn.
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
