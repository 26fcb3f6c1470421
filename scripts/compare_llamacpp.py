"""edgespec's `auto` side by side with every speculative decoding type of llama.cpp.

    python scripts/compare_llamacpp.py --llama-bin DIR [--suite code_editing|FILE ...]
        [--prompts N] [--tokens 128] [--repeats 2] [--threads 2] [--json FILE]
        [--markdown FILE] [--reuse-llama EARLIER.json] [--target GGUF --draft GGUF]
        [--only draft-simple] [--temperature 0.7 --top-p 0.95] [--plain [--fresh]]

DIR holds `llama-speculative-simple` built from the llama.cpp that llama-cpp-python vendors
(`scripts/build_llama_tools.sh llama-speculative-simple` builds it and prints its path). Every
prompt of the built-in suites (multi-turn sessions aside: llama.cpp's tool has no sessions), or
of JSONL files, goes through the target's chat template, greedy unless --temperature says
otherwise, to every `--spec-type` this llama.cpp offers that works with a plain draft model or
none (draft-simple at n-max 3, 5, 8 and 16 with p-min 0 and 0.75, ngram-simple, ngram-map-k,
ngram-map-k4v, ngram-mod, ngram-cache, ngram-mod + draft-simple; EAGLE-3, MTP and DFlash need
models made for them; `--only TYPE` keeps some), and to edgespec's `auto` and plain decoding,
in one process for edgespec, in alternating order (the order reverses every repeat). Reported
per prompt: the best llama.cpp configuration (median tok/s), auto's median tok/s and the
ratio; per suite the geometric means, also against llama.cpp's best chosen on the other repeats
(the fastest of several noisy medians leans high). Speeds are of generation, prompt processing
excluded on both sides, and both sides stop and count alike (`edgespec_run`): every token
decoded until the round that reaches --tokens, the end-of-generation token included. At a
temperature above 0 both sides sample (llama.cpp's tool with the same temperature and top-p),
and auto's text is not compared with plain decoding's.
A prompt with a JSON schema (the `structured` suite) is generated under it on both sides
(llama.cpp's `--json-schema`, edgespec's grammar), and llama.cpp's plain decoding
(`LLAMA_PLAIN_ARGS`) runs too: against it, the speed-up llama.cpp's speculation brings to
constrained output.
With --reuse-llama, llama.cpp's runs come from an earlier file (same machine, same settings)
and only edgespec's run, to measure a change to edgespec; the document says so.
With --plain, only plain decoding on both sides (llama.cpp's `LLAMA_PLAIN_ARGS` against
edgespec's `none`), interleaved: what edgespec's own loop costs against llama.cpp's. Both sides
sample with the temperature and top-p given and nothing else (llama.cpp's default top-k 40 and
min-p 0.05 are turned off, here as in every run, as edgespec has them off). With --fresh,
edgespec's runs too are each a new process that loads the pair, as every run of llama.cpp's
tool is: how fast a process's first-loaded model decodes varies from process to process (it
decoded 4-8 % slower than a second copy of it, benchmarks/overhead/first_load.py), and without
--fresh all of edgespec's runs share one process's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from edgespec.api import Speculator
from edgespec.bench.report import heldout_picks
from edgespec.bench.suites import BUILTIN, BenchPrompt, load_suite
from edgespec.engine.events import DoneEvent, RoundEvent, TokenEvent
from edgespec.engine.sampling import SamplingParams
from edgespec.models import files
from edgespec.models.registry import load_registry
from edgespec.options import K_MAX
from edgespec.system.device import cpu_model
from edgespec.text.grammar import Grammar

SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
DRAFTED = re.compile(r"n_drafted\s+=\s+(\d+)")
ACCEPTED = re.compile(r"n_accept\s+=\s+(\d+)")
NEEDS_OWN_MODELS = ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
SKIPPED_SUITES = ("multi_turn_editing",)
DRAFT_N_MAX = (3, 5, 8, 16)
DRAFT_P_MIN = (0.0, 0.75)
LLAMA_PLAIN = "llama.cpp plain"  # its own decoding without a draft, for prompts with a schema
# The tool refuses `--spec-type none` ("failed to initialize speculative decoding"); an n-gram
# type allowed no draft tokens decodes plainly (n_drafted = 0; the draft model is loaded, unused).
LLAMA_PLAIN_ARGS = [
    *("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "0", "--spec-ngram-mod-n-min", "0")
]
PLAIN_RATIOS = ("best_llama_over_llama_plain", "auto_over_llama_plain", "plain_over_llama_plain")


def load_pair(pair: tuple[Path, Path], threads: int) -> Speculator:
    """The pair as every comparison loads it: both models, the target first."""
    return Speculator.load(
        target=str(pair[0]),
        draft=str(pair[1]),
        drafter="auto",
        keep_draft=True,
        n_ctx=4096,
        n_threads=threads,
    )


def fresh_plain_run(
    pair: tuple[Path, Path], text: str, tokens: int, threads: int, sampling: SamplingParams
) -> dict[str, Any]:
    """`none` once, in the process this is called in: a new one per run (--fresh)."""
    spec = load_pair(pair, threads)
    prompt = spec.target.tokenize(text, add_special=True, parse_special=True)
    run = edgespec_run(spec, "none", prompt, tokens, "", sampling)
    spec.close()
    return run


def llama_configs(binary: Path, only: Sequence[str] = ()) -> dict[str, list[str]]:
    """Every speculative type the binary lists that this pair can run (or those of them in
    `only`), with its arguments."""
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    line = next((ln for ln in help_text.splitlines() if "--spec-type" in ln), "")
    types = re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)+", line.split("--spec-type", 1)[-1])
    types = [t for t in dict.fromkeys(types) if t not in NEEDS_OWN_MODELS]
    if not types:
        raise SystemExit(f"{binary} lists no --spec-type; is it llama-speculative-simple?")
    if only:
        types = [t for t in types if t in only]
    configs: dict[str, list[str]] = {}
    for t in types:
        if t == "draft-simple":
            # Its draft length and its confidence cut (p-min: stop drafting where the draft's
            # top probability is lower), at the defaults (n-max 3, p-min 0) and around them.
            for k, p_min in itertools.product(DRAFT_N_MAX, DRAFT_P_MIN):
                configs[f"draft-simple k={k} p={p_min:g}"] = [
                    *("--spec-type", t, "--spec-draft-n-max", str(k)),
                    *("--spec-draft-p-min", str(p_min)),
                ]
        else:
            configs[t] = ["--spec-type", t]
    if "ngram-mod" in types and "draft-simple" in types:
        configs["ngram-mod + draft-simple"] = ["--spec-type", "ngram-mod,draft-simple"]
    return configs


def llama_run(
    binary: Path,
    pair: tuple[Path, Path],
    text: str,
    extra: list[str],
    args: argparse.Namespace,
    seed: int,
) -> dict[str, float]:
    """One run of llama.cpp's tool. `seed` is the repeat's, as edgespec's side gets: with one
    seed for every repeat, llama.cpp wrote the same text each time at T > 0, so its best
    configuration kept its luckiest text even when chosen on the other repeats."""
    target, draft = pair
    command = [
        str(binary),
        *("-m", str(target), "-md", str(draft), "-p", text, "-n", str(args.tokens)),
        *("-t", str(args.threads), "-td", str(args.threads), "-c", "4096"),
        *("--temp", str(args.temperature), "--top-p", str(args.top_p), "--seed", str(seed)),
        *("--top-k", "0", "--min-p", "0", *extra),
    ]
    out = subprocess.run(command, capture_output=True, text=True)
    log = out.stdout + out.stderr
    m, d, a = SPEED.search(log), DRAFTED.search(log), ACCEPTED.search(log)
    if out.returncode != 0 or not (m and d and a):
        raise SystemExit(f"{' '.join(extra)}: llama.cpp failed:\n{log[-2000:]}")
    return {
        "tok_s": float(m.group(3)),
        "tokens": int(m.group(1)),
        "drafted": int(d.group(1)),
        "accepted": int(a.group(1)),
    }


def edgespec_run(
    spec: Speculator,
    drafter: str,
    prompt: list[int],
    tokens: int,
    instruction: str,
    sampling: SamplingParams | None = None,
    grammar: Grammar | None = None,
) -> dict[str, Any]:
    """One generation, stopped and counted as llama.cpp's tool does: it checks -n only between
    rounds and its n-gram types draft past it (177 tokens decoded for -n 128 after a 48-token
    copy), so edgespec stops after the round that reaches `tokens`, that round's draft not cut
    short at `tokens`; every token decoded counts, the end-of-generation token too."""
    spec.reset()  # every run starts from the priors, as a fresh `edgespec run` does
    out: list[int] = []
    done: DoneEvent | None = None
    stream = spec.stream(
        prompt,
        drafter=drafter,
        max_tokens=tokens + K_MAX + 1,
        instruction=instruction,
        sampling=sampling,
        grammar=grammar,
    )
    for event in stream:
        if isinstance(event, TokenEvent):
            out.append(event.token)
        elif isinstance(event, DoneEvent):
            done = event
            break
        elif isinstance(event, RoundEvent) and len(out) >= tokens:
            break
    stream.close()  # the generation's times end here, as when it ends by itself
    s = spec.session.last_stats
    assert s is not None
    decoded = s.generated + (done is not None and done.finish_reason == "stop")
    return {
        "tok_s": decoded / s.decode_s,
        "tokens": decoded,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "out": out[:tokens],
    }


def compare_prompt(
    spec: Speculator,
    binary: Path,
    pair: tuple[Path, Path],
    configs: dict[str, list[str]],
    text: str,
    args: argparse.Namespace,
    item: BenchPrompt,
    reused: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Each configuration `args.repeats` times, alternating; `text`: the prompt through the
    chat template, `item` the suite's prompt (its user message and its schema if any)."""
    prompt = spec.target.tokenize(text, add_special=True, parse_special=True)
    schema = [] if item.schema is None else ["--json-schema", json.dumps(item.schema)]
    if schema:
        configs = {**configs, LLAMA_PLAIN: LLAMA_PLAIN_ARGS}
    configs = {name: [*extra, *schema] for name, extra in configs.items()}
    grammar = item.grammar
    names = [*configs, "edgespec auto", "edgespec plain"]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    if reused is not None:  # llama.cpp's runs from an earlier file: edgespec's alone now
        runs.update({name: reused[name] for name in configs})
        names = names[len(configs) :]
    for repeat in range(args.repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            if name.startswith("edgespec"):
                drafter = "auto" if name == "edgespec auto" else "none"
                sampling = SamplingParams(
                    temperature=args.temperature, top_p=args.top_p, seed=repeat + 1
                )
                run = edgespec_run(
                    spec, drafter, prompt, args.tokens, item.prompt, sampling, grammar
                )
                runs[name].append(run)
            else:
                run = llama_run(binary, pair, text, configs[name], args, seed=repeat + 1)
                runs[name].append(run)
            print(f"  {name}: {runs[name][-1]['tok_s']:.1f} tok/s", file=sys.stderr)
    return runs


def compare_plain(
    spec: Speculator, binary: Path, pair: tuple[Path, Path], text: str, args: argparse.Namespace
) -> dict[str, Any]:
    """llama.cpp's plain decoding and edgespec's `none`, `args.repeats` times each, alternating
    (the order reversed every repeat): their median speeds and edgespec's over llama.cpp's."""
    prompt = spec.target.tokenize(text, add_special=True, parse_special=True)
    speeds: dict[str, list[float]] = {LLAMA_PLAIN: [], "edgespec plain": []}
    for repeat in range(args.repeats):
        sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=repeat + 1)
        for name in list(speeds) if repeat % 2 == 0 else list(speeds)[::-1]:
            if name == LLAMA_PLAIN:
                run = llama_run(binary, pair, text, LLAMA_PLAIN_ARGS, args, seed=repeat + 1)
            elif args.fresh:
                with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as child:
                    job = child.submit(
                        fresh_plain_run, pair, text, args.tokens, args.threads, sampling
                    )
                    run = job.result()
            else:
                run = edgespec_run(spec, "none", prompt, args.tokens, "", sampling)
            speeds[name].append(run["tok_s"])
            print(f"  {name}: {run['tok_s']:.2f} tok/s", file=sys.stderr)
    median = {name: statistics.median(v) for name, v in speeds.items()}
    return {
        "tok_s": speeds,
        "median_tok_s": median,
        "plain_over_llama_plain": median["edgespec plain"] / median[LLAMA_PLAIN],
    }


def plain_main(
    args: argparse.Namespace, spec: Speculator, binary: Path, pair: tuple[Path, Path]
) -> None:
    suites = args.suite or [s for s in BUILTIN if s not in SKIPPED_SUITES]
    doc: dict[str, Any] = {
        "machine": f"{cpu_model()} ({platform.machine()}), {args.threads} threads",
        "settings": vars(args) | {"llama_bin": str(args.llama_bin)},
        "suites": {},
    }
    ratios = []
    for suite in suites:
        results = []
        for i, item in enumerate(load_suite(suite)[: args.prompts or None], 1):
            print(f"{suite} #{i}", file=sys.stderr)
            system = [{"role": "system", "content": item.system}] if item.system else []
            text = spec.target.render_chat([*system, {"role": "user", "content": item.prompt}])
            results.append({"name": f"#{i}"} | compare_plain(spec, binary, pair, text, args))
            ratios.append(results[-1]["plain_over_llama_plain"])
        doc["suites"][suite] = results
    doc["plain_over_llama_plain"] = {
        "geomean": geomean(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }
    spec.close()
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    lines = [
        "| suite | prompt | llama.cpp plain tok/s | edgespec none tok/s | ratio |",
        "|---|---|---|---|---|",
    ]
    for suite, results in doc["suites"].items():
        for r in results:
            m, ratio = r["median_tok_s"], r["plain_over_llama_plain"]
            row = [suite, r["name"], f"{m[LLAMA_PLAIN]:.2f}", f"{m['edgespec plain']:.2f}"]
            lines.append("| " + " | ".join([*row, f"{ratio:.3f}"]) + " |")
    g = doc["plain_over_llama_plain"]
    lines.append(
        f"\nedgespec none / llama.cpp plain, geometric mean: {g['geomean']:.3f} "
        f"({g['min']:.3f}-{g['max']:.3f})"
    )
    print("\n".join(lines))


def heldout_best(llama: dict[str, list[float]]) -> float | None:
    """llama.cpp's best configuration chosen on the other repeats and timed on the one left
    out (`report.heldout_picks`), averaged over the repeats (None with one repeat)."""
    picks = heldout_picks(llama)
    return None if picks is None else statistics.mean(picks)


def summarise(runs: dict[str, list[dict[str, Any]]], greedy: bool = True) -> dict[str, Any]:
    median = {name: statistics.median(r["tok_s"] for r in rs) for name, rs in runs.items()}
    llama = {n: v for n, v in median.items() if not n.startswith("edgespec") and n != LLAMA_PLAIN}
    best = max(llama, key=llama.__getitem__)
    auto, plain = median["edgespec auto"], median["edgespec plain"]
    # Sampled texts differ from run to run: only greedy ones are compared.
    same = greedy and all(
        r["out"] == runs["edgespec plain"][0]["out"] for r in runs["edgespec auto"]
    )
    held = heldout_best({n: [r["tok_s"] for r in runs[n]] for n in llama})
    return {
        "median_tok_s": median,
        "best_llama": best,
        "best_llama_tok_s": llama[best],
        "heldout_best_llama_tok_s": held,
        "auto_tok_s": auto,
        "plain_tok_s": plain,
        "auto_over_best_llama": auto / llama[best],
        "auto_over_heldout_best_llama": auto / held if held else None,
        "auto_over_plain": auto / plain,
        "best_llama_over_plain": llama[best] / plain,
        "auto_text_equals_plain": same,
    } | _against_llama_plain(median)


def _against_llama_plain(median: dict[str, float]) -> dict[str, float]:
    """With a schema: llama.cpp's plain constrained decoding against its best speculation and
    against edgespec's auto and plain decoding."""
    if LLAMA_PLAIN not in median:
        return {}
    plain = median[LLAMA_PLAIN]
    best = max(v for n, v in median.items() if not n.startswith("edgespec") and n != LLAMA_PLAIN)
    return {
        "llama_plain_tok_s": plain,
        "best_llama_over_llama_plain": best / plain,
        "auto_over_llama_plain": median["edgespec auto"] / plain,
        "plain_over_llama_plain": median["edgespec plain"] / plain,
    }


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "| suite | prompt | best llama.cpp | its tok/s | auto tok/s | auto / best | "
        "auto / plain | best llama.cpp / plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for suite, prompts in doc["suites"].items():
        for p in prompts:
            s = p["summary"]
            lines.append(
                f"| {suite} | {p['name']} | {s['best_llama']} | {s['best_llama_tok_s']:.1f} | "
                f"{s['auto_tok_s']:.1f} | {s['auto_over_best_llama']:.2f}x | "
                f"{s['auto_over_plain']:.2f}x | {s['best_llama_over_plain']:.2f}x |"
            )
    lines += [
        "",
        "| suite | auto / best llama.cpp (geo-mean, min-max) | auto / best, chosen on other "
        "runs | auto / plain | best llama.cpp / plain |",
        "|---|---|---|---|---|",
    ]
    for suite, g in doc["geomeans"].items():
        held = g["auto_over_heldout_best_llama"]
        lines.append(
            f"| {suite} | {g['auto_over_best_llama']:.2f}x ({g['min']:.2f}-{g['max']:.2f}) | "
            f"{'-' if held is None else f'{held:.2f}x'} | "
            f"{g['auto_over_plain']:.2f}x | {g['best_llama_over_plain']:.2f}x |"
        )
    constrained = {suite: g for suite, g in doc["geomeans"].items() if PLAIN_RATIOS[0] in g}
    if constrained:
        lines += [
            "",
            "| suite (under its JSON schemas) | best llama.cpp / llama.cpp plain | "
            "auto / llama.cpp plain | edgespec plain / llama.cpp plain |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {suite} | " + " | ".join(f"{g[key]:.2f}x" for key in PLAIN_RATIOS) + " |"
            for suite, g in constrained.items()
        ]
    wins: dict[str, int] = {}
    for prompts in doc["suites"].values():
        for p in prompts:
            wins[p["summary"]["best_llama"]] = wins.get(p["summary"]["best_llama"], 0) + 1
    lines += [
        "",
        "llama.cpp's best configuration, prompts won: "
        + ", ".join(f"{name} {n}" for name, n in sorted(wins.items(), key=lambda kv: -kv[1])),
    ]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-bin", type=Path, required=True)
    parser.add_argument(
        "--suite", action="append", help="a built-in suite or a JSONL file (default: all)"
    )
    parser.add_argument("--target", type=Path, help="a target GGUF (default: the default pair's)")
    parser.add_argument("--draft", type=Path, help="a draft GGUF (default: the default pair's)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run only this --spec-type of llama.cpp's (repeatable; e.g. draft-simple)",
    )
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--prompts", type=int, default=0, help="only the first N of each suite")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--reuse-llama",
        type=Path,
        help="take llama.cpp's runs from this earlier --json file; run only edgespec's",
    )
    parser.add_argument(
        "--plain", action="store_true", help="plain decoding only: edgespec none vs llama.cpp's"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="with --plain: each of edgespec's runs in a new process, as llama.cpp's are",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    binary = args.llama_bin / "llama-speculative-simple"
    configs = {} if args.plain else llama_configs(binary, args.only)
    pair_ref = load_registry().default_pair
    pair = (
        args.target or files.fetch(pair_ref.target).path,
        args.draft or files.fetch(pair_ref.draft).path,
    )
    spec = load_pair(pair, args.threads)
    if args.plain:
        return plain_main(args, spec, binary, pair)
    suites = args.suite or [s for s in BUILTIN if s not in SKIPPED_SUITES]
    earlier = json.loads(args.reuse_llama.read_text()) if args.reuse_llama else None
    doc: dict[str, Any] = {
        "machine": f"{cpu_model()} ({platform.machine()}), {args.threads} threads",
        "settings": vars(args) | {"llama_bin": str(args.llama_bin)},
        "llama_runs_from": str(args.reuse_llama) if args.reuse_llama else "this run",
        "llama_configs": configs,
        "suites": {},
        "geomeans": {},
    }
    for suite in suites:
        prompts = load_suite(suite)[: args.prompts or None]
        results: list[dict[str, Any]] = []
        for i, item in enumerate(prompts, 1):
            print(f"{suite} #{i}", file=sys.stderr)
            system = [{"role": "system", "content": item.system}] if item.system else []
            text = spec.target.render_chat([*system, {"role": "user", "content": item.prompt}])
            reused = None
            if earlier is not None:
                reused = earlier["suites"][suite][i - 1]["runs"]
            runs = compare_prompt(spec, binary, pair, configs, text, args, item, reused)
            results.append(
                {"name": f"#{i}", "summary": summarise(runs, args.temperature == 0), "runs": runs}
            )
            for r in runs["edgespec auto"] + runs["edgespec plain"]:
                del r["out"]  # compared in the summary; token ids are not worth keeping
        ratios = [r["summary"]["auto_over_best_llama"] for r in results]
        held = [r["summary"]["auto_over_heldout_best_llama"] for r in results]
        doc["suites"][suite] = results
        doc["geomeans"][suite] = {
            "auto_over_best_llama": geomean(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "auto_over_heldout_best_llama": None if None in held else geomean(held),
            "auto_over_plain": geomean([r["summary"]["auto_over_plain"] for r in results]),
            "best_llama_over_plain": geomean(
                [r["summary"]["best_llama_over_plain"] for r in results]
            ),
        } | {
            key: geomean([r["summary"][key] for r in results])
            for key in PLAIN_RATIOS
            if all(key in r["summary"] for r in results)
        }
    spec.close()
    table = markdown(doc)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
