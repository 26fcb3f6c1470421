"""The replacements a copy makes again (`Edits` in edgespec/auto/suffix.py), on and off in one
process, interleaved with plain decoding, on every prompt of code editing and of the held-out
edits: the record of the 2026-12-01 measurement in benchmarks/HISTORY.md.

    PYTHONPATH=.:benchmarks/edits .venv/bin/python benchmarks/edits/ab.py REPEATS OUT.json
"""

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from _common import edits, prompt_tokens, spec

from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent, TokenEvent

HELDOUT = "benchmarks/heldout"
SUITES = (
    ("code_editing", 256),
    (f"{HELDOUT}/heldout_long_editing.jsonl", 512),
    (f"{HELDOUT}/heldout_code_editing.jsonl", 256),
)
CONFIGS = ["plain", "auto", "auto+edits"]


def geo(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def one_run(name: str, prompt: list[int], max_tokens: int) -> tuple[float, list[int]]:
    edits(name == "auto+edits")
    spec.reset()
    out: list[int] = []
    tok_s = 0.0
    drafter = "none" if name == "plain" else "auto"
    for event in spec.stream(prompt, drafter=drafter, max_tokens=max_tokens):
        if isinstance(event, TokenEvent):
            out.append(event.token)
        elif isinstance(event, DoneEvent):
            tok_s = event.stats.tokens_per_s
    return tok_s, out


def measure(suite: str, i: int, text: str, max_tokens: int, repeats: int) -> dict[str, Any]:
    prompt = prompt_tokens(text)
    runs: dict[str, list[float]] = {name: [] for name in CONFIGS}
    outs: dict[str, list[int]] = {}
    for r in range(repeats):
        for name in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
            tok_s, outs[name] = one_run(name, prompt, max_tokens)
            runs[name].append(tok_s)
    med = {k: statistics.median(v) for k, v in runs.items()}
    rec: dict[str, Any] = {
        "suite": suite,
        "prompt": i,
        "tok_s": runs,
        "same_output": outs["auto"] == outs["plain"] == outs["auto+edits"],
        "tokens": len(outs["plain"]),
        "edits/auto": med["auto+edits"] / med["auto"],
        "auto/plain": med["auto"] / med["plain"],
        "edits/plain": med["auto+edits"] / med["plain"],
    }
    print(
        f"{suite} #{i}: plain {med['plain']:.1f} auto {med['auto']:.1f} "
        f"auto+edits {med['auto+edits']:.1f} tok/s; edits/auto {rec['edits/auto']:.3f}, "
        f"same output {rec['same_output']}",
        flush=True,
    )
    return rec


def main() -> None:
    repeats = int(sys.argv[1])
    results = []
    for suite, max_tokens in SUITES:
        name = Path(suite).stem
        for i, item in enumerate(load_suite(suite)):
            results.append(measure(name, i + 1, item.prompt, max_tokens, repeats))
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1))
    for s in dict.fromkeys(r["suite"] for r in results):
        rs = [r for r in results if r["suite"] == s]
        ratio = {key: [r[key] for r in rs] for key in ("edits/auto", "auto/plain", "edits/plain")}
        print(
            f"{s}: edits/auto {geo(ratio['edits/auto']):.3f} "
            f"({min(ratio['edits/auto']):.2f}-{max(ratio['edits/auto']):.2f}), "
            f"auto/plain {geo(ratio['auto/plain']):.3f}, "
            f"edits/plain {geo(ratio['edits/plain']):.3f} "
            f"({min(ratio['edits/plain']):.2f}-{max(ratio['edits/plain']):.2f})"
        )


if __name__ == "__main__":
    main()
