"""The load script's throughput workload in one process, without HTTP: N slots of one loaded
pair, each read from its own thread as the server's slots are read, each asking for greedy
32-token chat answers to its throughput prompts (mixed.py) one after another (one shared drafting
memory, as the load script's clients, which send no key, share one). Reports total tokens/s,
the acceptance, what share of the wall time the target decoded, the prompts' tokens read and
found cached, how many drafted tokens the rounds had, how many different answers each prompt
got, and with several slots the passes: how many, their tokens and sequences on average,
milliseconds a pass. With `--slots 1` the pair
runs without a batch, as the server runs one slot.

    PYTHONPATH=. python benchmarks/serve/several/fair/tput.py --slots 4 --drafter auto
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.api import Speculator
from edgespec.engine.batch import Batch
from edgespec.engine.events import DoneEvent, RoundEvent, TokenEvent
from edgespec.planner.decode_options import DecodeOptions
from edgespec.planner.make import make_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/serve
from mixed import THROUGHPUT


class Counting:
    """The target's batch decodes, counted (the tokens each sequence put in each pass)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.passes: list[tuple[int, ...]] = []

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        self.passes.append(tuple(len(tokens) for _, tokens, _ in requests))
        rows: list[np.ndarray] = self.model.decode_batch(requests)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--drafter", default="auto")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    plan = make_plan(DecodeOptions(drafter=args.drafter, offline=True, parallel=args.slots))
    spec = Speculator.load(plan=plan)
    counting = Counting(spec.target)
    if args.slots > 1:
        batch = Batch(counting)
        lanes = [spec.on_lane(batch, i) for i in range(args.slots)]
    else:
        lanes = [spec]
    rounds: Counter[int] = Counter()  # drafted tokens a round
    done = dict.fromkeys(("tokens", "answers", "drafted", "accepted", "read", "cached"), 0)
    answers: dict[str, Counter[str]] = {p: Counter() for p in THROUGHPUT}  # greedy: one each?
    lock = threading.Lock()
    end = time.perf_counter() + args.duration

    def client(i: int) -> None:
        rng = random.Random(args.seed * 100 + i)
        while time.perf_counter() < end:
            asked = rng.choice(THROUGHPUT)
            prompt = [{"role": "user", "content": asked}]
            text: list[str] = []
            for event in lanes[i].stream(prompt, drafter=args.drafter, max_tokens=args.max_tokens):
                if isinstance(event, TokenEvent):
                    text.append(event.text)
                elif isinstance(event, RoundEvent):
                    with lock:
                        rounds[event.drafted] += 1
                elif isinstance(event, DoneEvent):
                    with lock:
                        done["tokens"] += event.stats.generated
                        done["answers"] += 1
                        done["drafted"] += event.stats.drafted
                        done["accepted"] += event.stats.accepted
                        done["read"] += event.stats.prompt_tokens - event.stats.prompt_cached
                        done["cached"] += event.stats.prompt_cached
                        answers[asked]["".join(text)] += 1

    decode_s = spec.target.decode_s
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    decoded = spec.target.decode_s - decode_s
    sizes = [sum(p) for p in counting.passes] if args.slots > 1 else []
    print(
        f"{args.slots} slots, {args.drafter}: {done['tokens'] / wall:.1f} tok/s "
        f"({done['answers']} answers, {done['tokens']} tokens in {wall:.1f} s); "
        f"acceptance {done['accepted'] / max(1, done['drafted']):.2f}; "
        f"target decoding {100 * decoded / wall:.0f} % of the time; "
        f"prompts: {done['read']} tokens read, {done['cached']} found cached"
    )
    if sizes:
        n = len(sizes)
        print(
            f"{n} passes, {sum(sizes) / n:.1f} tokens a pass, "
            f"{sum(len(p) for p in counting.passes) / n:.2f} sequences a pass, "
            f"{1000 * decoded / n:.1f} ms a pass"
        )
    print("drafted a round:", sorted(rounds.items()))
    # Greedy answers to one prompt differ only where a near-tie of the target's two best tokens
    # fell the other way in a pass of another size (llama.cpp's rows depend on the batch).
    print("different answers to each prompt:", [len(a) for a in answers.values()])


if __name__ == "__main__":
    main()
