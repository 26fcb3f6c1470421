"""The benchmark's tables: each one's columns and its rows of text, computed from the runs
(`edgespec.bench.output` writes them out)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from edgespec.bench.configs import BASELINE
from edgespec.bench.measure import PARTS, Measurement
from edgespec.bench.runner import BenchResult, Divergence, PromptResult


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def by_suite(result: BenchResult) -> dict[str, list[PromptResult]]:
    """The prompts every configuration has run, per suite."""
    suites: dict[str, list[PromptResult]] = {}
    for p in result.prompts:
        if all(c.label in p.runs for c in result.configs):
            suites.setdefault(p.prompt.suite, []).append(p)
    return suites


def best_fixed(p: PromptResult) -> tuple[str, float]:
    """The best configuration other than auto, in hindsight (the baseline counts: 1.0)."""
    fixed = {label: p.speedup(label) for label in p.runs if label != "auto"}
    label = max(fixed, key=lambda k: fixed[k])
    return label, fixed[label]


def heldout_picks(speeds: Mapping[str, Sequence[float]]) -> list[float] | None:
    """Per repeat, the speed there of the configuration fastest (median) on the other repeats,
    so not chosen on the run it is timed on (the best in hindsight, the largest of several
    noisy medians, leans high); None with one repeat."""
    repeats = min(len(v) for v in speeds.values())
    if repeats < 2:
        return None
    picks = []
    for r in range(repeats):
        others = {
            label: statistics.median([*v[:r], *v[r + 1 : repeats]]) for label, v in speeds.items()
        }
        picks.append(speeds[max(others, key=others.__getitem__)][r])
    return picks


def heldout_ratio(p: PromptResult) -> float | None:
    """Auto against the best fixed configuration chosen on the other repeats (`heldout_picks`),
    repeat by repeat, geometric mean; None with one repeat."""
    if "auto" not in p.runs:
        return None
    repeats = min(len(runs) for runs in p.runs.values())
    speeds = {label: [m.tokens_per_s for m in runs[:repeats]] for label, runs in p.runs.items()}
    auto = speeds.pop("auto")
    picks = heldout_picks(speeds)
    if picks is None or min(picks) <= 0:
        return None
    return geomean([a / pick for a, pick in zip(auto, picks, strict=True)])


def _mean(prompts: list[PromptResult], label: str, key: str = "tokens_per_s") -> float:
    """The mean over prompts of each prompt's median."""
    return statistics.mean(p.median(label, key) for p in prompts)


def _mean_ms(runs: Iterable[Measurement], key: str) -> str:
    """The mean of a figure in ms over the runs that have it ("-": none has)."""
    values = [value for m in runs if (value := getattr(m, key)) is not None]
    return f"{statistics.mean(values):.2f}" if values else "-"


def summary_rows(result: BenchResult) -> list[list[str]]:
    """Per suite and configuration (`SUMMARY_COLUMNS`): the speedup's geometric mean over
    prompts (min-max), the peak memory's maximum, the draft step's mean over runs, and the
    others' means over prompts of each prompt's median."""
    rows = []
    for suite, prompts in by_suite(result).items():
        for config in result.configs:
            label = config.label
            speedups = [p.speedup(label) for p in prompts]
            runs = [m for p in prompts for m in p.runs[label]]
            rows.append(
                [
                    suite,
                    label,
                    f"{geomean(speedups):.2f}x ({min(speedups):.2f}-{max(speedups):.2f})",
                    f"{_mean(prompts, label):.1f}",
                    f"{_mean(prompts, label, 'acceptance_rate'):.0%}"
                    if label != BASELINE.label
                    else "-",
                    f"{_mean(prompts, label, 'mean_accepted_length'):.2f}",
                    f"{_mean(prompts, label, 'draft_share'):.0%}",
                    _mean_ms(runs, "draft_outside_ms"),
                    f"{_mean(prompts, label, 'ttft_s'):.2f}",
                    f"{max(m.peak_rss for m in runs) / 1e9:.2f}",
                ]
            )
    return rows


SUMMARY_COLUMNS = [
    "suite",
    "config",
    "speedup",
    "tok/s",
    "accept",
    "tok/pass",
    "drafting",
    "py ms/step",
    "TTFT s",
    "peak GB",
]
PROMPT_COLUMNS = ["suite", "#", "config", "tok/s (min-max)", "speedup", "accept", "lossless"]


def prompt_rows(result: BenchResult) -> list[list[str]]:
    rows = []
    for p in result.prompts:
        for label, runs in p.runs.items():
            speeds = [m.tokens_per_s for m in runs]
            rows.append(
                [
                    p.prompt.suite,
                    str(p.prompt.index + 1),
                    label,
                    f"{p.median(label):.1f} ({min(speeds):.1f}-{max(speeds):.1f})",
                    f"{p.speedup(label):.2f}x" if BASELINE.label in p.runs else "-",
                    f"{p.median(label, 'acceptance_rate'):.0%}" if label != BASELINE.label else "-",
                    _lossless(p.divergences.get(label)),
                ]
            )
    return rows


def _lossless(div: Divergence | None) -> str:
    if div is None:
        return "yes"
    if div.near_tie:
        return f"near-tie at {div.position} (gap {div.logit_gap:.2f})"
    return f"NO: differs at token {div.position}"


def hindsight_rows(result: BenchResult) -> list[list[str]]:
    """Auto against the best fixed configuration per prompt."""
    rows = []
    for prompts in by_suite(result).values():
        for p in prompts:
            if "auto" not in p.runs:
                continue
            label, best = best_fixed(p)
            auto = p.speedup("auto")
            heldout = heldout_ratio(p)
            rows.append(
                [
                    p.prompt.suite,
                    str(p.prompt.index + 1),
                    f"{auto:.2f}x",
                    label,
                    f"{best:.2f}x",
                    f"{auto / best:.0%}",
                    "-" if heldout is None else f"{heldout:.0%}",
                ]
            )
    return rows


HINDSIGHT_COLUMNS = [
    "suite",
    "#",
    "auto",
    "best fixed",
    "its speedup",
    "auto / best",
    "chosen on other runs",
]


def prediction_rows(result: BenchResult) -> list[list[str]]:
    """How well auto predicted its rounds' time, per suite and kind of round: the median over
    runs of each run's median relative error."""
    rows = []
    for suite, prompts in by_suite(result).items():
        errors: dict[str, list[float]] = {}
        for p in prompts:
            for m in p.runs.get("auto", []):
                for source, error in m.round_time_error.items():
                    errors.setdefault(source, []).append(error)
        for source, values in sorted(errors.items()):
            rows.append([suite, source, f"{statistics.median(values):.0%}", str(len(values))])
    return rows


PREDICTION_COLUMNS = ["suite", "round", "median error", "runs"]


def structured_rows(result: BenchResult) -> list[list[str]]:
    """Prompts with schemas, per configuration (`STRUCTURED_COLUMNS`), then plain decoding of
    the same prompts and lengths without the grammar: what the grammar costs per token."""
    rows = []
    for suite, prompts in by_suite(result).items():
        prompts = [p for p in prompts if p.prompt.schema is not None]
        if not prompts:
            continue
        for config in result.configs:
            runs = [m for p in prompts for m in p.runs[config.label]]
            rows.append(
                [
                    suite,
                    config.label,
                    f"{sum(bool(m.valid) for m in runs)}/{len(runs)}",
                    f"{_mean(prompts, config.label, 'grammar_share'):.0%}",
                    _mean_ms(runs, "outside_ms_per_token"),
                    f"{_mean(prompts, config.label):.1f}",
                ]
            )
        free = [p for p in prompts if p.free_runs]
        if free:
            speed = statistics.mean(
                statistics.median(m.tokens_per_s for m in p.free_runs) for p in free
            )
            ms = _mean_ms((m for p in free for m in p.free_runs), "outside_ms_per_token")
            rows.append([suite, "none, no grammar", "-", "-", ms, f"{speed:.1f}"])
    return rows


STRUCTURED_COLUMNS = ["suite", "config", "valid", "from grammar", "outside ms/token", "tok/s"]


def parts_rows(result: BenchResult) -> list[list[str]]:
    """Per suite and configuration: the time outside llama.cpp's decodes per generated token,
    by part (median over a prompt's runs, mean over prompts), and its total."""
    rows = []
    for suite, prompts in by_suite(result).items():
        for config in result.configs:
            measured = [p for p in prompts if all(m.parts_ms for m in p.runs[config.label])]
            if not measured:
                continue
            means = [
                statistics.mean(
                    statistics.median(m.parts_ms[part] for m in p.runs[config.label])
                    for p in measured
                )
                for part in PARTS
            ]
            rows.append([suite, config.label, *(f"{v:.3f}" for v in means), f"{sum(means):.3f}"])
    return rows


PARTS_COLUMNS = ["suite", "config", *PARTS, "total"]


def session_rows(result: BenchResult) -> list[list[str]]:
    """Editing sessions: auto's speed on the later turns against the first turn."""
    turns: dict[tuple[str, int], dict[int, float]] = {}
    for p in result.prompts:
        if p.prompt.session is not None and "auto" in p.runs:
            turns.setdefault((p.prompt.suite, p.prompt.session), {})[p.prompt.turn] = p.median(
                "auto"
            )
    rows = []
    for (suite, session), speeds in sorted(turns.items()):
        later = [v for t, v in speeds.items() if t > 0]
        if 0 not in speeds or not later:
            continue
        mean = statistics.mean(later)
        rows.append(
            [suite, str(session + 1), f"{speeds[0]:.1f}", f"{mean:.1f}", f"{mean / speeds[0]:.2f}x"]
        )
    return rows


SESSION_COLUMNS = ["suite", "session", "auto tok/s turn 1", "later turns", "later / first"]
