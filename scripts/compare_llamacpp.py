"""Compare edgespec with llama.cpp's own examples on the same models, prompt and settings.

    python scripts/compare_llamacpp.py --llama-bin DIR [--mode draft|lookup] [--k 4]
        [--p-min 0.75] [--suite-prompt code_editing:1] [--repeats 3]

--mode draft runs `llama-speculative-simple` (draft model, K, p_min) against edgespec's model
drafter with the same K and p_min; --mode lookup runs `llama-lookup` (n-gram lookup, K)
against edgespec's ngram drafter with the same K and its auto drafter. DIR holds the binaries,
built from the llama.cpp that llama-cpp-python vendors (docs/benchmarks.md says how). Runs
alternate (A B A B ...); medians are reported, with edgespec's Python time per round (the part
of a round not spent inside llama.cpp's decode calls).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from edgespec.api import Speculator
from edgespec.bench.suites import load_suite
from edgespec.engine.drafters import Drafter, ModelDrafter, NgramDrafter, NoDrafter
from edgespec.engine.events import DoneEvent
from edgespec.engine.generate import GenerationConfig
from edgespec.models import files
from edgespec.models.registry import load_registry

CODE_PROMPT = (
    "# Python: a binary search tree with insert, delete, search and in-order traversal\n"
    "class Node:\n"
)
SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
DRAFTED = re.compile(r"n_drafted\s+=\s+(\d+)")
ACCEPTED = re.compile(r"n_accept\s+=\s+(\d+)")


def llama_run(
    binary: Path, target: Path, draft: Path, text: str, args: argparse.Namespace
) -> dict[str, float]:
    common = [
        "-m",
        str(target),
        "-p",
        text,
        "-n",
        str(args.tokens),
        "-t",
        str(args.threads),
        "-c",
        "4096",
        "--temp",
        "0",
        "--seed",
        "1",
    ]
    if args.mode == "draft":
        extra = [
            "-md",
            str(draft),
            "-td",
            str(args.threads),
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            str(args.k),
            "--spec-draft-n-min",
            "0",
            "--spec-draft-p-min",
            str(args.p_min),
        ]
    else:
        extra = ["--spec-draft-n-max", str(args.k)]
    out = subprocess.run([str(binary), *common, *extra], capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr
    m, d, a = SPEED.search(log), DRAFTED.search(log), ACCEPTED.search(log)
    if not (m and d and a):
        raise SystemExit(f"could not parse {binary.name} output:\n{log[-2000:]}")
    return {
        "tokens": int(m.group(1)),
        "tok_s": float(m.group(3)),
        "drafted": int(d.group(1)),
        "accepted": int(a.group(1)),
    }


def edgespec_run(
    spec: Speculator, drafter: Drafter | str, k: int, prompt: list[int], args: argparse.Namespace
) -> dict[str, float]:
    spec.reset()
    chosen, policy = spec.strategy(drafter, k)
    decode_s = 0.0
    models = [m for m in (spec.target, spec.draft) if m is not None]
    originals = [m.decode for m in models]

    def timed(fn):  # type: ignore[no-untyped-def]
        def wrapper(tokens, n_logits=1):  # type: ignore[no-untyped-def]
            nonlocal decode_s
            t = time.perf_counter()
            try:
                return fn(tokens, n_logits)
            finally:
                if n_logits:  # the prompt feed (no logits) belongs to prompt time, not to rounds
                    decode_s += time.perf_counter() - t

        return wrapper

    for m, fn in zip(models, originals, strict=True):
        m.decode = timed(fn)
    try:
        done = None
        config = GenerationConfig(max_tokens=args.tokens)
        for event in spec.session.generate(prompt, chosen, config, policy):
            if isinstance(event, DoneEvent):
                done = event
    finally:
        for m, fn in zip(models, originals, strict=True):
            m.decode = fn
    assert done is not None
    s = done.stats
    return {
        "tokens": s.generated,
        "tok_s": s.tokens_per_s,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "rounds": s.rounds,
        "python_ms_per_round": 1000 * (s.decode_s - decode_s) / max(s.rounds, 1),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-bin", type=Path, required=True)
    parser.add_argument("--mode", choices=["draft", "lookup"], default="draft")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--p-min", type=float, default=0.75)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--suite-prompt", help="SUITE:N, a built-in prompt through the chat template"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    pair = load_registry().default_pair
    target, draft = files.fetch(pair.target).path, files.fetch(pair.draft).path
    spec = Speculator.load(
        target=str(target),
        draft=str(draft),
        drafter="auto",
        keep_draft=True,
        n_ctx=4096,
        n_threads=args.threads,
    )
    assert spec.draft is not None and spec.auto is not None
    if args.suite_prompt:
        suite, _, number = args.suite_prompt.partition(":")
        chosen = load_suite(suite)[int(number) - 1]
        text = spec.target.render_chat([{"role": "user", "content": chosen.prompt}])
    else:
        text = CODE_PROMPT
    prompt = spec.target.tokenize(text, add_special=True, parse_special=True)
    if args.mode == "draft":
        binary = args.llama_bin / "llama-speculative-simple"
        ours: dict[str, tuple[Drafter | str, int]] = {
            "edgespec model": (ModelDrafter(spec.draft, p_min=args.p_min), args.k)
        }
    else:
        binary = args.llama_bin / "llama-lookup"
        ours = {
            "edgespec none (plain)": (NoDrafter(), 0),
            "edgespec ngram": (NgramDrafter(), args.k),
            "edgespec auto": ("auto", 32),
        }
    for drafter, k in ours.values():
        edgespec_run(spec, drafter, k, prompt, args)  # warm-up
    runs: dict[str, list[dict[str, float]]] = {"llama.cpp": [], **{name: [] for name in ours}}
    for _ in range(args.repeats):
        runs["llama.cpp"].append(llama_run(binary, target, draft, text, args))
        for name, (drafter, k) in ours.items():
            runs[name].append(edgespec_run(spec, drafter, k, prompt, args))
    median: dict[str, Any] = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    base = median["llama.cpp"]["tok_s"]
    median["ratio_to_llama.cpp"] = {name: median[name]["tok_s"] / base for name in ours}
    print(
        json.dumps(
            {
                "settings": vars(args) | {"llama_bin": str(args.llama_bin)},
                "prompt_tokens": len(prompt),
                "runs": runs,
                "median": median,
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
