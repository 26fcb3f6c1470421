"""Two lanes of one Batch on the default target, each read from its own thread as a server's
slots read them, `none`, greedy: the total tokens/s of both against one lane read alone, the
passes that carried both, and milliseconds a pass (the adapter's decode time), three rounds.

    PYTHONPATH=. python benchmarks/serve/several/fair/lanes.py [--tokens 128] [TARGET.gguf]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter

from edgespec.api import Speculator
from edgespec.engine.events import TokenEvent
from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry

PROMPTS = (
    "Write a Python function that checks whether a number is prime.",
    "Explain how a CPU cache works, step by step, in detail.",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", help="a GGUF (default: the default pair's target)")
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    path = args.target or str(files.fetch(load_registry().default_pair.target).path)
    model = LlamaModel(path, LoadOptions(n_ctx=2048, sequences=2))
    lanes = Speculator(model, None).lanes(2)
    batch = lanes[0].batch
    assert batch is not None

    def read(i: int, out: dict[int, tuple[float, int]]) -> None:
        lanes[i].session.reset()
        started = time.perf_counter()
        events = lanes[i].stream(PROMPTS[i], drafter="none", max_tokens=args.tokens)
        made = sum(isinstance(e, TokenEvent) for e in events)
        out[i] = (time.perf_counter() - started, made)

    for _ in range(3):
        alone: dict[int, tuple[float, int]] = {}
        read(0, alone)
        both: dict[int, tuple[float, int]] = {}
        passes, decode_s = batch.passes, model.decode_s
        threads = [threading.Thread(target=read, args=(i, both)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        passes = batch.passes - passes
        sizes = Counter(list(batch.sizes)[-passes:])
        wall = max(s for s, _ in both.values())
        made = sum(n for _, n in both.values())
        print(
            f"alone {alone[0][1] / alone[0][0]:.1f} tok/s; two lanes {made / wall:.1f} tok/s, "
            f"{passes} passes ({sizes[2]} carrying both), "
            f"{1000 * (model.decode_s - decode_s) / passes:.1f} ms a pass",
            flush=True,
        )


if __name__ == "__main__":
    main()
