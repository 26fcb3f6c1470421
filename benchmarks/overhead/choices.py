"""`auto`'s and the draft model's decisions round by round on the instant fake models, recorded
so that a change meant to make the engine cheaper can be shown to decide nothing differently.

    PYTHONPATH=. python benchmarks/overhead/choices.py OUT.json [--compare BEFORE.json]

Every drafter (`none`, `model`, `auto` with the draft model and trees), greedy and at
temperature 0.7 / top-p 0.95 (seeded), with and without a JSON-schema grammar, after a short and
a long prompt, twice each (the second generation starts from what the first taught): each
round's choice (proposal, K, shape, bucket, probe, shadow, the predicted round time to the last
bit), its outcome (drafted, accepted, the draft's confidences to the last bit) and the tokens.
Once with the costs fixed (the calibration alone decides) and once learned from round times
read off a clock that advances with the decodes (5 ms a target decode, 1 ms a draft decode,
20 us a cached token), so that learning is exercised and deterministic: a round's timing
points must stay where they are relative to the decodes for two runs to agree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).parent))

import overhead

from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.engine import generate
from edgespec.engine.drafters import Choice, Proposal
from edgespec.engine.events import RoundEvent, TokenEvent


class DecodeClock:
    """perf_counter for the engine: time advances with the fake models' work only."""

    def __init__(self, bench: overhead.Bench) -> None:
        self.bench = bench

    def __call__(self) -> float:
        target, draft = self.bench.target, self.bench.draft
        return 0.005 * target.decodes + 0.001 * draft.decodes + 2e-5 * len(target.tokens)


def _choice(choice: Choice | None) -> list[Any] | None:
    if choice is None:
        return None
    shown = [type(choice.proposal).__name__, choice.k, choice.width, choice.nodes]
    extra = [getattr(choice, name, None) for name in ("probe", "shadow", "predicted_s")]
    bucket = getattr(choice, "bucket", None)
    return [*shown, bucket.value if bucket else None, *map(repr, extra), choice.stop is not None]


def generation(
    bench: overhead.Bench, config: overhead.Config, context: int, log: list[Any]
) -> dict[str, Any]:
    log.clear()
    rounds, tokens = [], []
    for event in bench.stream(config, 96, context):
        if isinstance(event, RoundEvent):
            confidence = [repr(c) for c in event.confidence]
            rounds.append([event.drafter, event.k, event.drafted, event.accepted, confidence])
        elif isinstance(event, TokenEvent):
            tokens.append(event.token)
    return {"choices": list(log), "rounds": rounds, "tokens": tokens}


def record(vocab: int = overhead.VOCAB) -> dict[str, Any]:
    bench = overhead.Bench.make(vocab, copy_logits=False)
    log: list[Any] = []
    choose = AdaptiveDraftLength.choose

    def logged(policy: AdaptiveDraftLength, proposals: Sequence[Proposal]) -> Choice | None:
        chosen = choose(policy, proposals)
        log.append(_choice(chosen))
        return chosen

    out: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(AdaptiveDraftLength, "choose", logged))
        for learn in (False, True):
            if learn:
                bench.spec.enable_auto(overhead.FAST_DEVICE, use_model=True, step_s=0.005)
                clock = DecodeClock(bench)
                stack.enter_context(mock.patch.object(generate, "perf_counter", clock))
            for context in (64, 1500):
                for config in overhead.configs(["auto", "model", "none"]):
                    for repeat in range(2):
                        key = f"{config.name}, context {context}, repeat {repeat}, learn {learn}"
                        out[key] = generation(bench, config, context, log)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, help="an earlier recording: exit 1 if it differs")
    args = parser.parse_args(argv)
    recorded = record()
    args.out.write_text(json.dumps(recorded))
    rounds = sum(len(g["rounds"]) for g in recorded.values())
    print(f"{len(recorded)} generations, {rounds} rounds")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    differ = [key for key in before if before[key] != recorded.get(key)]
    for key in differ:
        print(f"differs: {key}: {difference(before[key], recorded.get(key))}")
    print("identical" if not differ and before.keys() == recorded.keys() else "DIFFERENT")
    return 1 if differ or before.keys() != recorded.keys() else 0


def difference(old: dict[str, Any], new: dict[str, Any] | None) -> str:
    """What differs in one generation: its tokens, the policy's choices, the rounds' outcomes,
    or only the draft's confidences (and by how much, relative)."""
    if new is None:
        return "missing"
    parts = []
    if old["tokens"] != new["tokens"]:
        parts.append("tokens")
    if old["choices"] != new["choices"]:
        changed = sum(a != b for a, b in zip(old["choices"], new["choices"], strict=False))
        parts.append(f"choices ({changed} of {len(old['choices'])})")
    outcomes = [r[:4] for r in old["rounds"]], [r[:4] for r in new["rounds"]]
    if outcomes[0] != outcomes[1]:
        parts.append("rounds")
    pairs = [
        (float(a), float(b))
        for r, s in zip(old["rounds"], new["rounds"], strict=False)
        for a, b in zip(r[4], s[4], strict=False)
    ]
    moved = max((abs(b / a - 1.0) for a, b in pairs if a != b), default=0.0)
    if moved:
        parts.append(f"confidences (by at most {moved:.2g} relative)")
    return ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
