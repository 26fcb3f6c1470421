"""Why a greedy answer under load can differ from the same request alone: the target's two best
tokens at the point where the answers part, with the prompt read whole or split (a prefix
already in the KV cache and the rest read after it, as the server's prefix reuse does).

    python benchmarks/serve/near_tie.py [--prompt TEXT] [--steps 16]

Prints, per split, the first step whose two best tokens are within --gap of each other: the
two tokens and the gap between their logits.
"""

from __future__ import annotations

import argparse

import numpy as np

from edgespec.api import Speculator

PROMPT = "Write a Python function that checks whether a number is prime."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--steps", type=int, default=16, help="greedy steps to look through")
    parser.add_argument("--gap", type=float, default=0.1, help="a near-tie: logits this close")
    args = parser.parse_args()
    spec = Speculator.load(drafter="none", offline=True)
    target = spec.target
    tokens = list(spec.prompt_tokens([{"role": "user", "content": args.prompt}]))
    for split in (0, len(tokens) // 2, len(tokens) - 12, len(tokens) - 1):
        target.rewind(0)
        if split:
            target.decode(tokens[:split], 0)
        row = target.decode(tokens[split:])[0]
        for step in range(args.steps):
            first, second = (int(i) for i in np.argsort(row)[-2:][::-1])
            gap = float(row[first] - row[second])
            if gap < args.gap:
                best = [target.detokenize([first]), target.detokenize([second])]
                print(f"split at {split}: step {step}, {best[0]!r} over {best[1]!r} by {gap:.4f}")
                break
            row = target.decode([first])[0]
        else:
            print(f"split at {split}: no near-tie in {args.steps} steps")
    spec.close()


if __name__ == "__main__":
    main()
