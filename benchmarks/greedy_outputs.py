"""Whether a change leaves greedy outputs as they were: the greedy outputs of built-in (or
JSONL) prompts for several drafters, recorded as token ids at two commits and compared token
for token (a restructuring must not change one).

    PYTHONPATH=TREE python benchmarks/greedy_outputs.py record OUT.json \
        [--target T --draft D] [--suite S ...] [--drafters none,ngram,model,auto] [-n 96]
    python benchmarks/greedy_outputs.py compare BEFORE.json AFTER.json

Run `record` with PYTHONPATH at each commit's tree (a git worktree), then `compare` (exit
status 1 where an output differs). `auto` chooses K from measured round times, so on a
near-tie a different batch shape can flip a token (see `edgespec bench`'s divergence report):
`compare` says whether each side equals plain decoding's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from edgespec import BUILTIN_SUITES, Speculator, TokenEvent, load_suite

Outputs = dict[str, dict[str, list[int]]]


def code_of(answer: str) -> str:
    """The first fenced code block of an answer (the whole answer when there is none): an
    editing session's next file, as `edgespec bench` takes it."""
    match = re.search(r"```[^\n]*\n(.*?)```", answer, re.DOTALL)
    return match.group(1) if match else answer


def record(args: argparse.Namespace) -> None:
    models = {"target": args.target, "draft": args.draft} if args.target else {}
    spec = Speculator.load(drafter="auto", keep_draft=True, offline=True, **models)
    results: Outputs = {}
    sessions: dict[int, str] = {}  # an editing session's file, as plain decoding left it
    for suite in args.suite or BUILTIN_SUITES:
        for p in load_suite(suite):
            text = p.prompt
            if p.session is not None:
                text = p.edit_prompt((p.file or "") if p.turn == 0 else sessions[p.session])
            key = f"{suite}/{p.index}"
            results[key] = {}
            for name in args.drafters.split(","):
                spec.reset()
                start = time.perf_counter()
                cap = min(p.max_tokens or args.max_tokens, args.max_tokens)
                events = spec.stream(text, drafter=name, max_tokens=cap, system=p.system)
                results[key][name] = [e.token for e in events if isinstance(e, TokenEvent)]
                seconds = time.perf_counter() - start
                print(f"{key} {name}: {len(results[key][name])} tokens, {seconds:.1f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
            # Written as it goes: on a slow machine what was recorded is kept.
            Path(args.out).write_text(json.dumps(results))
            if p.session is not None:
                sessions[p.session] = code_of(spec.target.detokenize(results[key]["none"]))


def compare(before: Outputs, after: Outputs) -> int:
    """Print every output that differs; the number that do."""
    same = differ = 0
    for key in sorted(set(before) & set(after)):
        for name in sorted(set(before[key]) & set(after[key])):
            old, new = before[key][name], after[key][name]
            if old == new:
                same += 1
                continue
            differ += 1
            pairs = enumerate(zip(old, new, strict=False))
            at = next((i for i, (x, y) in pairs if x != y), min(len(old), len(new)))
            plain = (old == before[key].get("none"), new == after[key].get("none"))
            print(f"{key} {name}: differs at token {at}; equal to plain before/after: {plain}")
    print(f"identical {same}, different {differ}")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--target")
    rec.add_argument("--draft")
    rec.add_argument("--suite", action="append")
    rec.add_argument("--drafters", default="none,ngram,model,auto")
    rec.add_argument("-n", "--max-tokens", type=int, default=96)
    cmp = sub.add_parser("compare")
    cmp.add_argument("before")
    cmp.add_argument("after")
    args = parser.parse_args()
    if args.command == "record":
        record(args)
    else:
        before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
        sys.exit(1 if compare(before, after) else 0)


if __name__ == "__main__":
    main()
