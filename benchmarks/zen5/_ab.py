"""What the A/B scripts here share: per suite, the geometric means of the new configuration
against the old and of each against plain decoding."""

import math
import statistics

from edgespec.engine.events import DoneEvent


def geo(values):
    return math.exp(statistics.mean(math.log(v) for v in values))


def report(medians, new, old):
    """`medians`: (suite, {configuration: median tok/s}) per prompt, plain decoding as "none";
    `new` and `old`: the two configurations, named in the output without "auto-"."""
    n, o = new.removeprefix("auto-"), old.removeprefix("auto-")
    for name in dict.fromkeys(s for s, _ in medians):
        got = [m for s, m in medians if s == name]
        print(
            f"{name}: {n}/{o} {geo([m[new] / m[old] for m in got]):.3f}  "
            f"{o}/plain {geo([m[old] / m['none'] for m in got]):.3f}  "
            f"{n}/plain {geo([m[new] / m['none'] for m in got]):.3f}"
        )


def interleaved(configs, repeats, run):
    """The median of `run(config)` for each configuration, run `repeats` times in turn, the
    order reversed every other time."""
    runs = {c: [] for c in configs}
    for r in range(repeats):
        for c in list(configs) if r % 2 == 0 else list(configs)[::-1]:
            runs[c].append(run(c))
    return {c: statistics.median(v) for c, v in runs.items()}


def tok_s(spec, tokens, **stream):
    """One generation from a fresh start; its tok/s."""
    spec.reset()
    for event in spec.stream(tokens, **stream):
        if isinstance(event, DoneEvent):
            break
    return spec.session.last_stats.tokens_per_s
