"""Predicted outputs on the default pair: edit prompts whose prediction is the original file.

    PYTHONPATH=. python benchmarks/predicted/predicted.py [--suite code_editing]
        [--repeats 3] [--max-tokens 400] [--json OUT]

Per prompt of the suite, greedy, interleaved (the order reversed every other repeat, so drift
hits all alike): plain decoding (`none`), `auto` without a prediction, `auto` with the prompt's
file as the prediction (`prediction_of`: what OpenAI's predicted outputs are for), and `auto`
with a prediction wrong everywhere (as many characters of an unrelated file: the standard
library's `textwrap.py`; code in the same language, so chance matches of a few tokens happen,
as they would with a wrong file). Each run's tokens/s (prompt processing excluded) and the two
counters, and the counters checked against the draft log (the RoundEvents whose drafts came
from the prediction); every configuration's tokens checked against plain decoding's.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import textwrap
from typing import Any

from edgespec.api import PREDICTION, Speculator
from edgespec.bench.runner import prediction_of
from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent, RoundEvent, TokenEvent
from edgespec.engine.sampling import SamplingParams

CONFIGS = ("none", "auto", "auto+prediction", "auto+wrong")
WRONG = inspect.getsource(textwrap)


def one_run(
    spec: Speculator, tokens: list[int], config: str, file: str, max_tokens: int
) -> dict[str, Any]:
    spec.reset()
    prediction = {"auto+prediction": file, "auto+wrong": WRONG[: len(file)]}.get(config)
    events = spec.stream(
        tokens,
        drafter="none" if config == "none" else "auto",
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=0.0),
        prediction=prediction,
    )
    out: list[int] = []
    rounds: list[tuple[str, int, int, float]] = []  # drafter, drafted, accepted, seconds
    done = None
    for event in events:
        if isinstance(event, TokenEvent):
            out.append(event.token)
        elif isinstance(event, RoundEvent):
            seconds = event.draft_s + event.verify_s
            rounds.append((event.drafter, event.drafted, event.accepted, seconds))
        elif isinstance(event, DoneEvent):
            done = event
    drafted = sum(r[1] for r in rounds if r[0] == PREDICTION)
    accepted = sum(r[2] for r in rounds if r[0] == PREDICTION)
    assert done is not None
    s = done.stats
    return {
        "tokens_per_s": s.tokens_per_s,
        "generated": s.generated,
        "finish_reason": done.finish_reason,
        "accepted_prediction_tokens": s.accepted_prediction_tokens,
        "rejected_prediction_tokens": s.rejected_prediction_tokens,
        "log_accepted": accepted,
        "log_rejected": drafted - accepted,
        "target_passes": s.rounds,
        "by_drafter": {k: vars(v) for k, v in s.by_drafter.items()},
        "rounds": rounds,
        "tokens": out,
    }


def line(index: int, entry: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> str:
    """One prompt's figures, as they come."""
    passes = ", ".join(f"{c} {v[0]['target_passes']}" for c, v in runs.items())
    speeds = ", ".join(f"{c} {s:.2f}" for c, s in entry["median_tokens_per_s"].items())
    counts = {
        c: f"{runs[c][0]['accepted_prediction_tokens']}/{runs[c][0]['rejected_prediction_tokens']}"
        for c in ("auto+prediction", "auto+wrong")
    }
    return (
        f"#{index + 1} {len(runs['none'][0]['tokens'])} tokens; target passes {passes}; "
        f"{speeds} tok/s; identical {entry['identical_to_plain']}; "
        f"counters = log {entry['counters_match_log']}; accepted/rejected {counts}"
    )


def summary(prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per configuration: the median over prompts of each prompt's median tokens/s, and of
    its speed-up over plain decoding and over auto without a prediction."""
    out: dict[str, Any] = {}
    for config in CONFIGS:
        speeds = [p["median_tokens_per_s"][config] for p in prompts]
        out[config] = {
            "median_tokens_per_s": statistics.median(speeds),
            "median_vs_none": statistics.median(
                p["median_tokens_per_s"][config] / p["median_tokens_per_s"]["none"] for p in prompts
            ),
            "median_vs_auto": statistics.median(
                p["median_tokens_per_s"][config] / p["median_tokens_per_s"]["auto"] for p in prompts
            ),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="code_editing")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--json", default=None)
    ap.add_argument("--prompts", default=None, help="1-based prompt numbers, e.g. 1,3,5")
    args = ap.parse_args()
    prompts = [p for p in load_suite(args.suite) if prediction_of(p, p.file) is not None]
    if args.prompts:
        prompts = [p for p in prompts if str(p.index + 1) in args.prompts.split(",")]
    results = []
    with Speculator.load(offline=True, drafter="auto") as spec:
        cal = spec.plan.calibration if spec.plan is not None else None
        tau = cal.tau if cal is not None else {}  # a verification's cost in target steps
        # Warm-up: first-use allocations and caches, not measured.
        one_run(
            spec, spec.prompt_tokens(prompts[0].prompt, system=prompts[0].system), "none", "", 8
        )
        for p in prompts:
            text = p.edit_prompt(p.file) if p.file is not None else p.prompt
            tokens = spec.prompt_tokens(text, system=p.system)
            file = prediction_of(p, p.file)
            assert file is not None
            runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONFIGS}
            for r in range(args.repeats):
                for config in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
                    runs[config].append(one_run(spec, tokens, config, file, args.max_tokens))
            plain = runs["none"][0]["tokens"]
            entry = {
                "index": p.index,
                "prompt": p.prompt[:80],
                "median_tokens_per_s": {
                    c: statistics.median(x["tokens_per_s"] for x in v) for c, v in runs.items()
                },
                "identical_to_plain": {
                    c: all(x["tokens"] == plain for x in v) for c, v in runs.items()
                },
                "counters_match_log": all(
                    x["accepted_prediction_tokens"] == x["log_accepted"]
                    and x["rejected_prediction_tokens"] == x["log_rejected"]
                    for v in runs.values()
                    for x in v
                ),
                "runs": runs,
            }
            results.append(entry)
            if args.json:  # after each prompt: what was measured survives an interruption
                with open(args.json, "w") as f:
                    json.dump({"args": vars(args), "tau": tau, "prompts": results}, f)
            print(line(p.index, entry, runs), flush=True)
    doc = {"args": vars(args), "tau": tau, "summary": summary(results), "prompts": results}
    print(json.dumps(doc["summary"], indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
