"""How edgespec's `auto` compares with llama.cpp's own speculative decoding on this machine:
the same pair, the same prompts, every `--spec-type` of llama.cpp's `llama-speculative-simple`
that runs with a plain draft model or none, against edgespec's `auto` and plain decoding.

    python benchmarks/compare_llamacpp.py --llama-bin DIR [--suite code_editing|FILE ...]
        [--prompts N] [--tokens 128] [--repeats 2] [--threads 2] [--json FILE]
        [--markdown FILE] [--reuse-llama EARLIER.json] [--target GGUF --draft GGUF]
        [--only draft-simple] [--temperature 0.7 --top-p 0.95] [--plain [--fresh]]

DIR holds `llama-speculative-simple` built from the llama.cpp that llama-cpp-python vendors
(`scripts/build_llama_tools.sh llama-speculative-simple` builds it and prints its path); the
pair is the default one (`edgespec pull`) unless --target and --draft name GGUFs. Every prompt
of the built-in suites (multi-turn sessions aside: llama.cpp's tool has none), or of JSONL
files, goes through the target's chat template to each configuration, greedy unless
--temperature says otherwise, in alternating order (reversed every repeat). Reported per
prompt: llama.cpp's best configuration (median tok/s), auto's median tok/s and their ratio; per
suite the geometric means, also against llama.cpp's best chosen on the other repeats (the
fastest of several noisy medians leans high). Speeds are of generation, prompt processing
excluded, and both sides stop and count alike (`edgespec_run`). A prompt with a JSON schema
(the `structured` suite) is generated under it on both sides, and llama.cpp's plain decoding
runs too. --reuse-llama takes llama.cpp's runs from an earlier --json file (same machine and
settings) and runs only edgespec's. --plain runs plain decoding only on both sides (edgespec's
`none` against llama.cpp's `LLAMA_PLAIN_ARGS`): what edgespec's own loop costs; with --fresh
each of edgespec's runs is a new process that loads the pair, as each of llama.cpp's is (how
fast a process's first-loaded model decodes varies from process to process). Both sides sample
with the temperature and top-p given and nothing else (llama.cpp's default top-k and min-p are
turned off, as edgespec has them).
"""

from __future__ import annotations

import argparse
import itertools
import json
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

# Beside this script (Python puts its folder first on the path).
from compare_tables import LLAMA_PLAIN, geomean, markdown, plain_markdown, suite_geomeans, summarise

from edgespec import (
    BUILTIN_SUITES,
    K_MAX,
    BenchPrompt,
    DoneEvent,
    Grammar,
    RoundEvent,
    SamplingParams,
    Speculator,
    TokenEvent,
    load_suite,
)

SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
DRAFTED = re.compile(r"n_drafted\s+=\s+(\d+)")
ACCEPTED = re.compile(r"n_accept\s+=\s+(\d+)")
NEEDS_OWN_MODELS = ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
SKIPPED_SUITES = ("multi_turn_editing",)
DRAFT_N_MAX = (3, 5, 8, 16)
DRAFT_P_MIN = (0.0, 0.75)
# The tool refuses `--spec-type none` ("failed to initialize speculative decoding"); an n-gram
# type allowed no draft tokens decodes plainly (n_drafted = 0; the draft model is loaded, unused).
LLAMA_PLAIN_ARGS = [
    *("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "0", "--spec-ngram-mod-n-min", "0")
]


def machine() -> str:
    """The processor's name (Linux's /proc/cpuinfo; elsewhere what `platform` knows)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return f"{names[0] if names else platform.processor()} ({platform.machine()})"


def default_pair(args: argparse.Namespace) -> tuple[Path, Path]:
    """The default pair's files (`edgespec pull` fetches what is missing and prints both
    paths), each replaced by --target or --draft where given."""
    pulled = subprocess.run(
        [sys.executable, "-m", "edgespec", "pull"], stdout=subprocess.PIPE, text=True, check=True
    )
    target, draft = (Path(line) for line in pulled.stdout.splitlines())
    return args.target or target, args.draft or draft


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
    suites = args.suite or [s for s in BUILTIN_SUITES if s not in SKIPPED_SUITES]
    doc: dict[str, Any] = {
        "machine": f"{machine()}, {args.threads} threads",
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
    print(plain_markdown(doc))


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
    pair = (args.target, args.draft) if args.target and args.draft else default_pair(args)
    spec = load_pair(pair, args.threads)
    if args.plain:
        return plain_main(args, spec, binary, pair)
    suites = args.suite or [s for s in BUILTIN_SUITES if s not in SKIPPED_SUITES]
    earlier = json.loads(args.reuse_llama.read_text()) if args.reuse_llama else None
    doc: dict[str, Any] = {
        "machine": f"{machine()}, {args.threads} threads",
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
        doc["suites"][suite] = results
        doc["geomeans"][suite] = suite_geomeans(results)
    spec.close()
    table = markdown(doc)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
