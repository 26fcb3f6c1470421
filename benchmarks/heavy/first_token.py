"""Time to the first token of a machine's first-ever `edgespec run` (no calibration cached),
against plain decoding's, for a target and draft given by path.

    python benchmarks/heavy/first_token.py TARGET.gguf DRAFT.gguf [--repeats 3]

Each repeat starts `edgespec run PROMPT --max-tokens 16` in a new process with an empty
EDGESPEC_HOME (so nothing is cached) and times, from the start of the process, the first byte
of the answer on stdout: once with `--drafter none`, once with `--drafter auto`, alternating.
Both times include loading the models; the first-ever auto run then measures the device after
its answer, which is not timed here. Prints the medians and their difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "Write a Python function that checks whether a number is prime."


def first_byte_s(target: str, draft: str, drafter: str) -> float:
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, EDGESPEC_HOME=home)
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgespec", "run", PROMPT, "--max-tokens", "16",
             "--target", target, "--draft", draft, "--drafter", drafter, "--offline"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        assert proc.stdout is not None
        proc.stdout.read(1)
        elapsed = time.perf_counter() - start
        proc.stdout.read()
        if proc.wait() != 0:
            raise SystemExit(f"edgespec run --drafter {drafter} failed")
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"none": [], "auto": []}
    for repeat in range(args.repeats):
        for drafter in ("none", "auto") if repeat % 2 == 0 else ("auto", "none"):
            times[drafter].append(first_byte_s(args.target, args.draft, drafter))
    plain, auto = (statistics.median(times[d]) for d in ("none", "auto"))
    print(
        f"first token, first-ever run: plain {plain:.2f} s, auto {auto:.2f} s, "
        f"auto - plain {auto - plain:+.2f} s (medians of {args.repeats}; all: {times})"
    )


if __name__ == "__main__":
    main()
