"""Compare edgespec with llama.cpp's own speculative example on the same models and settings.

    python scripts/compare_llamacpp.py --llama-bin DIR [--k 4] [--p-min 0.75] [--repeats 3]

DIR holds `llama-speculative-simple`, built from the llama.cpp that llama-cpp-python vendors
(its sdist's vendor/llama.cpp; see docs/benchmarks.md). Runs alternate between the two (A B A B
...) and medians are reported, with edgespec's Python time per round: the part of a round not
spent inside llama.cpp's decode calls.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import time
from pathlib import Path

from edgespec import hub
from edgespec.api import Speculator
from edgespec.engine.drafters import ModelDrafter
from edgespec.engine.events import DoneEvent
from edgespec.engine.generate import GenerationConfig
from edgespec.registry import load_registry

PROMPT = (
    "# Python: a binary search tree with insert, delete, search and in-order traversal\n"
    "class Node:\n"
)
SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
ACCEPT = re.compile(r"n_drafted = (\d+)\s+.*?n_accept\s+= (\d+)", re.S)


def llama_run(
    binary: Path, target: Path, draft: Path, args: argparse.Namespace
) -> dict[str, float]:
    cmd = [
        str(binary),
        "-m",
        str(target),
        "-md",
        str(draft),
        "-p",
        PROMPT,
        "-n",
        str(args.tokens),
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        str(args.k),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        str(args.p_min),
        "-t",
        str(args.threads),
        "-td",
        str(args.threads),
        "-c",
        "4096",
        "--temp",
        "0",
        "--seed",
        "1",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr
    m = SPEED.search(log)
    a = ACCEPT.search(log)
    if not m or not a:
        raise SystemExit(f"could not parse llama-speculative-simple output:\n{log[-2000:]}")
    return {
        "tokens": int(m.group(1)),
        "tok_s": float(m.group(3)),
        "drafted": int(a.group(1)),
        "accepted": int(a.group(2)),
    }


def edgespec_run(
    spec: Speculator, drafter: ModelDrafter, args: argparse.Namespace
) -> dict[str, float]:
    spec.reset()
    decode_s = 0.0
    models = [spec.target, spec.draft]
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
        prompt = spec.target.tokenize(PROMPT, add_special=True, parse_special=True)
        config = GenerationConfig(max_tokens=args.tokens)
        done = None
        for event in spec.session.generate(prompt, drafter, config, args.k):
            if isinstance(event, DoneEvent):
                done = event
    finally:
        for m, fn in zip(models, originals, strict=True):
            m.decode = fn
    assert done is not None
    s = done.stats
    python_s = s.decode_s - decode_s
    return {
        "tokens": s.generated,
        "tok_s": s.tokens_per_s,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "rounds": s.rounds,
        "python_ms_per_round": 1000 * python_s / max(s.rounds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-bin", type=Path, required=True)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--p-min", type=float, default=0.75)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    pair = load_registry().default_pair
    target, draft = hub.fetch(pair.target).path, hub.fetch(pair.draft).path
    binary = args.llama_bin / "llama-speculative-simple"
    spec = Speculator.load(
        target=str(target), draft=str(draft), drafter="model", n_ctx=4096, n_threads=args.threads
    )
    assert spec.draft is not None
    drafter = ModelDrafter(spec.draft, p_min=args.p_min)
    edgespec_run(spec, drafter, args)  # warm-up
    runs: dict[str, list[dict[str, float]]] = {"llama.cpp": [], "edgespec": []}
    for _ in range(args.repeats):
        runs["llama.cpp"].append(llama_run(binary, target, draft, args))
        runs["edgespec"].append(edgespec_run(spec, drafter, args))
    summary = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    summary["ratio"] = {"tok_s": summary["edgespec"]["tok_s"] / summary["llama.cpp"]["tok_s"]}
    print(
        json.dumps(
            {
                "settings": vars(args) | {"llama_bin": str(args.llama_bin)},
                "runs": runs,
                "median": summary,
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
