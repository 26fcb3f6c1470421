"""Which function's cost per call grows with the conversation: every function's time per call
under cProfile after a short and a long prompt, with the instant fake models.

    PYTHONPATH=. python benchmarks/overhead/profile_contexts.py [--contexts 100,4000]
        [--configs none,model,auto] [--tokens 128] [--repeats 6]

For each drafter, greedy and at temperature 0.7 / top-p 0.95, `--repeats` generations after
each prompt length are profiled from their first event on (reading the prompt, once per
generation, left out); a Python function is listed where its own time per call (cProfile's
tottime, profiler overhead included) at the longest context is at least 1.5 times that at the
shortest and at least 2 us more. Functions called fewer than once per 20 tokens are left out,
and so are numpy's and the builtins' (what one call costs depends on its arguments: an argmax
over 152k logits or over a row's 20 likeliest; the function that calls it shows the growth).
The answer's length is the other axis (`--tokens`): a cost that grows with it shows at either
context. Exit status 1 where a function grows.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections.abc import Sequence

import overhead

from edgespec.engine.events import DoneEvent, TokenEvent

GROWTH = 1.5
MIN_EXTRA_US = 2.0


def profiled_rounds(
    bench: overhead.Bench, config: overhead.Config, context: int, tokens: int
) -> tuple[cProfile.Profile, int]:
    """One generation after a prompt of `context` tokens, its rounds profiled: from its first
    event to its `tokens`-th token (the prompt's reading and the generation's end, once per
    generation, left out: the end indexes the whole conversation into the session's memory
    once); and the tokens it made by then."""
    stream = bench.stream(config, 2 * tokens, context)
    profile = cProfile.Profile()
    made = 0
    for i, event in enumerate(stream):
        if i == 0:
            profile.enable()
        made += isinstance(event, TokenEvent)
        if made >= tokens or isinstance(event, DoneEvent):
            break
    profile.disable()
    stream.close()
    return profile, made


def per_call(
    bench: overhead.Bench, config: overhead.Config, context: int, args: argparse.Namespace
) -> dict[str, float]:
    """Each Python function of the rounds -> its own microseconds per call (numpy's and the
    builtins' calls are left out: what one costs depends on what it is given, which the
    function calling it shows)."""
    stats = pstats.Stats()
    made = 0
    for _ in range(args.repeats):
        profile, tokens = profiled_rounds(bench, config, context, args.tokens)
        stats.add(profile)
        made += tokens
    out = {}
    for (path, line, name), (_, calls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if path != "~" and calls >= made / 20:
            out[f"{path.rsplit('/', 1)[-1]}:{line}({name})"] = tottime / calls * 1e6
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="100,4000")
    parser.add_argument("--configs", default="none,model,auto")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    contexts = [int(c) for c in args.contexts.split(",")]
    bench = overhead.Bench.make(overhead.VOCAB, copy_logits=False)
    grown = 0
    for drafter in args.configs.split(","):
        for temperature in (0.0, 0.7):
            config = overhead.Config(drafter, temperature, False)
            short, long = (per_call(bench, config, c, args) for c in (contexts[0], contexts[-1]))
            found = [
                (name, short[name], us)
                for name, us in long.items()
                if name in short and us >= GROWTH * short[name] and us - short[name] >= MIN_EXTRA_US
            ]
            print(f"{config.name}: {len(long)} functions, {len(found)} grow")
            for name, before, after in found:
                print(f"    {name}: {before:.1f} -> {after:.1f} us a call")
            grown += len(found)
    return 1 if grown else 0


if __name__ == "__main__":
    raise SystemExit(main())
