"""Replay `auto`'s policy on recorded outputs, for any tau table, in seconds.

A change to the policy (a prior, a cap, how fast it learns) can be judged on every built-in
suite and on devices this machine is not: the target is replaced by one whose greedy token is
the recorded one, so the drafts, the rounds and the K chosen are exactly those `auto` would run
(greedy output does not depend on the drafts), and a round that verifies n tokens is charged
tau(n) target steps (edgespec/auto/replay.py replays; this script collects and reports). The
speed reported is tokens / steps, relative to plain decoding's one step a token: what a run
would reach without timing noise and without the learned costs (the calibration alone
decides); the draft model only with `--model` (below).

    python scripts/replay_policy.py --collect outputs.json       # greedy outputs (minutes)
    python scripts/replay_policy.py outputs.json ~/.cache/edgespec/calibration/KEY.json ...

Each calibration file (what `edgespec plan` measured) is one tau table; `--flat` adds a GPU-like
one (tau(n) = 1 + 0.02 (n - 1)). Greedy outputs belong to the machine that decoded them:
llama.cpp's kernels break near-ties differently from one CPU to another (12 of the 33 outputs
differed between the two EPYC kinds, benchmarks/HISTORY.md), so a replay meant to predict a
machine's runs uses outputs collected there. Every suite is replayed with chains only and with
tree drafts allowed (the target then verifies trees of up to 4 leaves, as llama.cpp's does).
Each output also records the replacements its instruction names ("hints", as token ids:
auto/hints.py), which auto's copies make from the start.

Sampled outputs (`--collect --temperature 0.7 --top-p 0.95 --samples 3`) replay lookups exactly
too: a lookup drafts tokens with certainty, and rejection sampling accepts such a token with the
target's probability of it and otherwise draws from the target without it, so every position's
token is drawn from the target's distribution whatever was drafted. A sampled answer can be
taken as drawn first and the drafts checked against it: the rounds on it are those `auto` would
run, and its samples together weigh them as often as they happen. (Not so for the draft model,
whose tokens are accepted with probability min(1, p/q): `--model` on sampled outputs counts
only the tokens the draft drew the same as the answer.)

With `--model` the draft model is on offer too: `--collect-draft` records, for every position of
each output, the draft model's two likeliest tokens and their probabilities (the draft reading
the recorded text; a draft chain is only ever accepted while it follows that text, so this is
what it would have drafted there), and a round's draft steps are charged c target steps each
(the calibration's draft step / target step; `--draft-cost` for the flat tau). A wrong draft
token is never accepted, but how long a chain goes on after it costs time: `--collect-off`
records the draft's confidence in the tokens it drafts after each of its misses (without it the
replay's draft has no idea there and stops at once, for free).

With `--bound`, each suite also gets what lookups could reach on its outputs knowing them: K
chosen every round knowing where the draft breaks, from the suffix drafter's continuations and
from any earlier text (`foresight`): how much of a goal a better policy could still reach.

With `--peers`, auto (trees allowed) is set against models of llama.cpp's drafters replayed on
the same outputs and tau (ngram-map-k; draft-simple at K 3 and 8 with `--model`): an estimate of
auto against llama.cpp on a device this machine is not, on one decoding loop (a real comparison,
scripts/compare_llamacpp.py, also measures how fast each side's plain loop is).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgespec.auto.config import AUTO, AutoConfig
from edgespec.auto.prior import CostModel
from edgespec.auto.replay import common, geo_mean, policy_config, replay
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import top_two
from edgespec.engine.events import TokenEvent
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.options import K_MAX, TREE_WIDTH
from edgespec.planner.calibrate import TAU_POINTS

SUITES = ("code_generation", "code_editing", "summarization", "chat", "multi_turn_editing")
SESSION_TOKENS = 512  # a turn of an editing session rewrites a whole file
GREEDY = Sampler(SamplingParams())


# How far lookups could go on an output, to judge a policy and a goal against: the same rounds
# with K chosen knowing where each draft breaks (a dynamic programme over the verification sizes
# measured, as auto may choose), once from the suffix drafter's own continuations and once from
# the longest stretch of the output found anywhere in the text before (a lookup that always
# picked the right place).
def drafter_copies(run: dict[str, Any]) -> list[int]:
    """At each position of the output, how many tokens of the suffix drafter's continuation
    there (up to K_MAX) the output holds."""
    prompt, out = list(run["prompt"]), list(run["out"])
    drafter = SuffixDrafter(past=run["history"], hints=run.get("hints", []))
    drafter.begin(prompt)
    lengths = []
    for i in range(len(out)):
        drafter.commit(prompt + out[:i])
        offered = drafter.offer(prompt + out[:i], K_MAX)
        found = offered[0].draft(K_MAX, GREEDY).tokens if offered else []
        lengths.append(common(found, out[i:]))
    return lengths


def longest_copies(run: dict[str, Any]) -> list[int]:
    """At each position of the output, the longest stretch of it (up to K_MAX) that follows
    an earlier occurrence of the last token anywhere in the text before (history, prompt,
    output so far)."""
    before = [t for doc in run["history"] for t in doc] + list(run["prompt"])
    out = list(run["out"])
    lengths = []
    for i in range(len(out)):
        text = before + out[:i]
        best = 0
        for j in range(1, len(text)):
            if text[j - 1] == text[-1]:
                best = max(best, common(text[j : j + K_MAX], out[i:]))
        lengths.append(best)
    return lengths


def foresight(lengths: Sequence[int], tau: dict[int, float]) -> float:
    """Tokens per target step with the best rounds given, at each position, how many drafted
    tokens the output would accept there: a draft of K costs tau(K + 1), K among the lengths
    whose verification was measured."""
    costs = CostModel(tau, 0.0)
    choices = costs.choices(K_MAX)
    n = len(lengths)
    steps = [0.0] * (n + 1)  # from each position to the end
    for i in range(n - 1, -1, -1):
        steps[i] = 1.0 + steps[i + 1]
        for k in choices:
            if k > lengths[i] or i + k >= n:
                break
            steps[i] = min(steps[i], costs.tau(k + 1) + steps[i + k + 1])
    return n / steps[0] if n else 1.0


# Models of llama.cpp's drafters, replayed on the same outputs and charged by the same tau as
# auto, so that auto against llama.cpp can be estimated on devices this machine is not (where
# its tools cannot run beside edgespec). ngram-map-k (the n-gram type that won most prompts
# here, common/ngram-map.cpp at its defaults): where the last 12 tokens occurred before with 48
# tokens after them, it drafts those 48 (the most recent such occurrence), or as many as were
# accepted the last time it drafted after the same 12 tokens. draft-simple: the
# draft model's greedy chain of K (p_min 0, its default); a round decodes K draft steps and
# then reads the target's batch of K + 1 into the draft.
MAP_KEY, MAP_VALUE = 12, 48
PEER_DRAFT_K = (3, 8)


def map_k_draft(text: Sequence[int]) -> list[int]:
    """What llama.cpp's ngram-map-k drafts after `text` (nothing: no earlier occurrence)."""
    n = len(text)
    if n <= MAP_KEY + MAP_VALUE:
        return []
    key = list(text[n - MAP_KEY :])
    for j in range(n - MAP_KEY - MAP_VALUE - 1, -1, -1):
        if text[j + MAP_KEY - 1] == key[-1] and list(text[j : j + MAP_KEY]) == key:
            return list(text[j + MAP_KEY : j + MAP_KEY + MAP_VALUE])
    return []


def peer(
    run: dict[str, Any],
    tau: dict[int, float],
    k: int = 0,
    c: float = 0.0,
    draft_tau: dict[int, float] | None = None,
) -> float:
    """Tokens per target step of a llama.cpp drafter on one output: ngram-map-k (k = 0) or
    draft-simple with K = k, a draft step costing c target steps and its batches draft_tau."""
    costs, draft_costs = CostModel(tau, 0.0), CostModel(draft_tau or tau, 0.0)
    prompt, out = list(run["prompt"]), list(run["out"])
    top = [int(row[0]) for row in run.get("draft", [])]
    learned: dict[tuple[int, ...], int] = {}  # ngram-map-k: per key, accepted the last time
    i, steps = 0, 0.0
    while i < len(out):
        limit = len(out) - i - 1  # llama.cpp drafts no further than it was asked to generate
        if k:  # the draft's first choices while on the record; off it, never accepted
            drafted = [top[i + j] if i + j < len(top) else -1 for j in range(min(k, limit))]
            steps += c * (len(drafted) + draft_costs.tau(len(drafted) + 1)) if drafted else 0.0
        else:
            text = prompt + out[:i]
            key = tuple(text[-MAP_KEY:])
            drafted = map_k_draft(text)[: min(learned.get(key, MAP_VALUE), limit)]
        accepted = common(drafted, out[i:])
        if not k and drafted:
            learned[key] = accepted
        steps += costs.tau(len(drafted) + 1)
        i += accepted + 1
    return len(out) / steps


def collect(
    path: Path,
    max_tokens: int,
    suites: Sequence[str] = SUITES,
    sampling: SamplingParams | None = None,
    samples: int = 1,
    **models: Any,
) -> None:
    """Plain decoding's outputs of every prompt of `suites`; with `sampling` at temperature > 0,
    `samples` sampled answers each (sample s of prompt i seeded `seed + 1000 s + i`), each
    session's turns building on that sample's own answers."""
    from edgespec.api import Speculator
    from edgespec.bench.runner import code_of
    from edgespec.bench.suites import load_suite

    spec = Speculator.load(drafter="none", **models)
    runs = []
    for sample in range(samples):
        sessions: dict[int, tuple[str, list[list[int]]]] = {}
        index = 0
        for suite in suites:
            for p in load_suite(suite):
                history: list[list[int]] = []
                text = p.prompt
                if p.session is not None:
                    file, history = sessions.get(p.session, (p.file or "", []))
                    text = p.edit_prompt(file)
                prompt = spec.prompt_tokens(text, system=p.system)
                spec.reset()
                limit = p.max_tokens or (SESSION_TOKENS if p.session is not None else max_tokens)
                params = None
                if sampling is not None:
                    seed = (sampling.seed or 0) + 1000 * sample + index
                    params = dataclasses.replace(sampling, seed=seed)
                events = spec.stream(prompt, drafter="none", max_tokens=limit, sampling=params)
                out = [e.token for e in events if isinstance(e, TokenEvent)]
                if p.session is not None:
                    answer = code_of(spec.target.detokenize(out))
                    sessions[p.session] = (answer, [*history, prompt + out])
                label = suite if p.session is None else f"{suite}, turn {p.turn + 1}"
                hints = spec.replacements(p.prompt)  # what auto's copies make from the start
                run: dict[str, Any] = {
                    "suite": label,
                    "prompt": prompt,
                    "out": out,
                    "history": history,
                    "hints": hints,
                }
                if params is not None:
                    run |= {
                        "sample": sample,
                        "index": index,
                        "sampling": dataclasses.asdict(params),
                    }
                runs.append(run)
                index += 1
    path.write_text(json.dumps(runs))


def collect_draft(path: Path, **models: Any) -> None:
    """Add the draft model's two likeliest tokens, with their probabilities, at every position
    of each recorded output, the draft reading the recorded prompt and output in one pass."""
    from edgespec.api import Speculator

    spec = Speculator.load(drafter="model", keep_draft=True, **models)
    draft = spec.draft
    assert draft is not None
    runs = json.loads(path.read_text())
    for run in runs:
        draft.rewind(0)
        if run["prompt"][:-1]:
            draft.decode(run["prompt"][:-1], 0)
        rows = draft.decode([run["prompt"][-1], *run["out"][:-1]], len(run["out"]))
        run["draft"] = [
            [a, b, round(pa, 4), round(pb, 4)] for (a, pa), (b, pb) in map(top_two, rows)
        ]
    path.write_text(json.dumps(runs))


OFF_DEPTH = 8  # tokens recorded after a miss; a draft model round rarely runs further past one


def collect_off(path: Path, **models: Any) -> None:
    """Add what the draft model does after it misses: at every position of each output where
    its likeliest token is not the recorded one, it is given that token and drafts on greedily
    for OFF_DEPTH more; its confidence in each is recorded (`run["off"]`)."""
    from edgespec.api import Speculator

    spec = Speculator.load(drafter="model", keep_draft=True, **models)
    draft = spec.draft
    assert draft is not None
    runs = json.loads(path.read_text())
    for run in runs:
        prompt = run["prompt"]
        draft.rewind(0)
        draft.decode(prompt, 0)
        off: dict[str, list[float]] = {}
        for i, (row, token) in enumerate(zip(run["draft"], run["out"], strict=True)):
            if row[0] != token:
                logits = draft.decode([int(row[0])], 1)[0]
                after = []
                for _ in range(OFF_DEPTH):
                    (best, p), _ = top_two(logits)
                    after.append(round(p, 4))
                    logits = draft.decode([best], 1)[0]
                off[str(i)] = after
                draft.rewind(len(prompt) + i)
            draft.decode([token], 0)
        run["off"] = off
    path.write_text(json.dumps(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outputs", type=Path)
    parser.add_argument("calibrations", type=Path, nargs="*")
    parser.add_argument(
        "--collect", action="store_true", help="write plain decoding's outputs to OUTPUTS"
    )
    parser.add_argument("--max-tokens", type=int, default=256, help="per single-turn prompt")
    parser.add_argument(
        "--suite",
        action="append",
        help="with --collect: a built-in suite or JSONL file (repeatable; default: the built-ins)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="with --collect: sample the outputs (lookups' rounds replay exactly on them)",
    )
    parser.add_argument("--top-p", type=float, default=1.0, help="with --temperature")
    parser.add_argument("--seed", type=int, default=1, help="with --temperature")
    parser.add_argument(
        "--samples", type=int, default=1, help="with --temperature: answers per prompt"
    )
    parser.add_argument("--target", help="with --collect: a target other than the default pair's")
    parser.add_argument("--draft", help="with --collect-draft: a draft other than the default")
    parser.add_argument("--flat", action="store_true", help="also a flat, GPU-like tau")
    parser.add_argument(
        "--collect-draft", action="store_true", help="add the draft model's top 2 to OUTPUTS"
    )
    parser.add_argument(
        "--collect-off",
        action="store_true",
        help="add what the draft model drafts after each of its misses to OUTPUTS",
    )
    parser.add_argument("--model", action="store_true", help="the draft model on offer too")
    parser.add_argument(
        "--bound", action="store_true", help="also what lookups reach knowing the output"
    )
    parser.add_argument(
        "--peers", action="store_true", help="auto against models of llama.cpp's drafters"
    )
    parser.add_argument(
        "--check-peers",
        type=Path,
        metavar="LLAMACPP_JSON",
        help="the models against llama.cpp's measured runs (scripts/compare_llamacpp.py --json)",
    )
    parser.add_argument(
        "--draft-cost", type=float, default=0.3, help="a draft step, in target steps (--flat)"
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replay auto with this PolicyConfig value (repeatable; auto/config.py)",
    )
    args = parser.parse_args()
    config = policy_config(args.policy)
    if args.samples > 1 and args.temperature <= 0:
        parser.error("--samples needs --temperature > 0: greedy answers are all the same")
    if args.check_peers and not args.calibrations:
        parser.error("--check-peers needs the calibration of the machine llama.cpp ran on")
    if args.collect or args.collect_draft or args.collect_off:
        models = {k: v for k, v in (("target", args.target), ("draft", args.draft)) if v}
        if args.collect:
            sampling = None
            if args.temperature > 0:
                sampling = SamplingParams(
                    temperature=args.temperature, top_p=args.top_p, seed=args.seed
                )
            suites = args.suite or SUITES
            collect(args.outputs, args.max_tokens, suites, sampling, args.samples, **models)
        if args.collect_draft:
            collect_draft(args.outputs, **models)
        if args.collect_off:
            collect_off(args.outputs, **models)
        return
    devices: dict[str, tuple[dict[int, float], float, dict[int, float]]] = {}
    for p in args.calibrations:
        cal = json.loads(p.read_text())
        tau = {int(n): v for n, v in cal["tau"].items()}
        draft_tau = {int(n): v for n, v in cal["draft_tau"].items()}
        devices[str(p)] = tau, cal["draft_step_s"] / cal["target_step_s"], draft_tau
    if args.flat:
        flat = {n: 1.0 + 0.02 * (n - 1) for n in TAU_POINTS}
        devices["flat"] = flat, args.draft_cost, flat
    runs = json.loads(args.outputs.read_text())
    if args.model and not all("off" in run for run in runs):
        print(
            "note: no record of the draft after its misses (--collect-off): its chains stop "
            "there for free, which flatters drafting unsure tokens",
            file=sys.stderr,
        )
    if args.check_peers:
        tau, c, draft_tau = devices[str(args.calibrations[0])]
        check_peers(runs, json.loads(args.check_peers.read_text()), tau, c, draft_tau)
        return
    for name, (tau, c, draft_tau) in devices.items():
        print(name + (f", draft model on offer (c = {c:.2f})" if args.model else ""))
        model = (c, draft_tau) if args.model else None
        if args.peers:
            report_peers(runs, tau, model, config)
        else:
            report(runs, tau, model, args.bound, config)


def _spread(values: Sequence[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def report(
    runs: Sequence[dict[str, Any]],
    tau: dict[int, float],
    model: tuple[float, dict[int, float]] | None,
    bound: bool = False,
    config: AutoConfig = AUTO,
) -> None:
    """Per suite: chains only, and with tree drafts of up to TREE_WIDTH leaves against them;
    `model`: the draft step in target steps and the draft's tau, when it is on offer; `bound`:
    also what lookups reach with foresight (`foresight`)."""
    c, draft_tau = model or (None, None)
    chains: dict[str, list[float]] = defaultdict(list)
    trees: dict[str, list[float]] = defaultdict(list)
    bounds: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        chains[run["suite"]].append(replay(run, tau, c=c, draft_tau=draft_tau, config=config))
        trees[run["suite"]].append(replay(run, tau, TREE_WIDTH, c, draft_tau, config))
        if bound:
            found = (drafter_copies(run), longest_copies(run))
            bounds[run["suite"]].append((foresight(found[0], tau), foresight(found[1], tau)))
    for suite, v in chains.items():
        ratio = [tree / chain for tree, chain in zip(trees[suite], v, strict=True)]
        print(
            f"  {suite:30} {geo_mean(v):.3f}x plain ({_spread(v)}); with trees "
            f"{geo_mean(trees[suite]):.3f}x, trees/chains {_spread(ratio)}"
        )
        if bound:
            own, anywhere = zip(*bounds[suite], strict=True)
            print(
                f"  {'':30} with foresight: the drafter's continuations {geo_mean(own):.3f}x "
                f"({_spread(own)}), any earlier text {geo_mean(anywhere):.3f}x "
                f"({_spread(anywhere)})"
            )


def report_peers(
    runs: Sequence[dict[str, Any]],
    tau: dict[int, float],
    model: tuple[float, dict[int, float]] | None,
    config: AutoConfig = AUTO,
) -> None:
    """Per single-turn suite (llama.cpp's tools have no sessions): auto as it runs (trees
    allowed) against each modelled llama.cpp drafter, and against the best of them per prompt
    (draft-simple only with `model`)."""
    c, draft_tau = model or (None, None)
    names = ["ngram-map-k", *(f"draft-simple k={k}" for k in PEER_DRAFT_K if model)]
    speeds: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run["suite"].startswith("multi_turn_editing"):
            continue
        got = speeds[run["suite"]]
        got["auto"].append(replay(run, tau, TREE_WIDTH, c, draft_tau, config))
        got["ngram-map-k"].append(peer(run, tau))
        for k in PEER_DRAFT_K if model else ():
            got[f"draft-simple k={k}"].append(peer(run, tau, k, c or 0.0, draft_tau))
    for suite, got in speeds.items():
        best = map(max, zip(*(got[n] for n in names), strict=True))
        ratio = [a / b for a, b in zip(got["auto"], best, strict=True)]
        peers = ", ".join(f"{n} {geo_mean(got[n]):.3f}x" for n in names)
        auto = f"auto {geo_mean(got['auto']):.3f}x plain"
        vs = f"auto / best llama.cpp {geo_mean(ratio):.2f}x ({_spread(ratio)})"
        print(f"  {suite:16} {auto}; llama.cpp {peers}; {vs}")


def check_peers(
    runs: Sequence[dict[str, Any]],
    measured: dict[str, Any],
    tau: dict[int, float],
    c: float,
    draft_tau: dict[int, float],
) -> None:
    """Per prompt, each modelled llama.cpp drafter on the first `--tokens` tokens of the
    recorded output against what llama.cpp ran at on that prompt, both relative to edgespec's
    plain decoding (so the measured side also holds the two plain loops' difference)."""
    tokens = measured["settings"]["tokens"]
    kinds = {"ngram-map-k": 0, **{f"draft-simple k={k}": k for k in PEER_DRAFT_K}}
    for suite, prompts in measured["suites"].items():
        recorded = [run for run in runs if run["suite"] == suite]
        for i, (run, prompt) in enumerate(zip(recorded, prompts, strict=True), 1):
            cut = {**run, "out": run["out"][:tokens], "draft": run.get("draft", [])[:tokens]}
            got = prompt["runs"]
            plain = statistics.median(r["tok_s"] for r in got["edgespec plain"])
            cells = []
            for name, k in kinds.items():
                model = peer(cut, tau, k, c, draft_tau)
                real = statistics.median(r["tok_s"] for r in got[name]) / plain
                cells.append(f"{name} {model:.2f} / {real:.2f}")
            print(f"  {suite:16} #{i}: modelled / measured x plain: " + ", ".join(cells))


if __name__ == "__main__":
    main()
