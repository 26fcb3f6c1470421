"""Verifying n tokens with llama.cpp's flash attention on and off, at 256, 800 and 1600 tokens of
context: the target loaded twice in one process (one context each way), measurements
interleaved, medians of 5. Run it twice, `on-first` and `off-first`, so that which copy of
the weights was loaded first (memory placement) cancels out:

    python flash_attn.py on-first; python flash_attn.py off-first
"""

import statistics
import sys
import time
from pathlib import Path

from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry

SIZES = (1, 4, 8, 16, 32)


def main() -> None:
    target = files.fetch(load_registry().default_pair.target).path
    order = (True, False) if sys.argv[1] == "on-first" else (False, True)
    models = {fa: LlamaModel(target, LoadOptions(flash_attn=fa)) for fa in order}
    source = (Path(__file__).parents[2] / "edgespec/auto/policy.py").read_text() * 3
    tokens = models[True].tokenize(source, add_special=False)
    for context in (256, 800, 1600):
        for model in models.values():
            model.rewind(0)
            model.decode(tokens[:context], 1)
        seconds: dict[tuple[bool, int], list[float]] = {(fa, n): [] for fa in models for n in SIZES}
        for _ in range(5):
            for n in SIZES:
                for fa, model in models.items():
                    started = time.perf_counter()
                    model.decode(tokens[context : context + n], n)
                    seconds[fa, n].append(time.perf_counter() - started)
                    model.rewind(context)
        cells = (
            f"n={n} on {statistics.median(seconds[True, n]) * 1e3:.1f} "
            f"off {statistics.median(seconds[False, n]) * 1e3:.1f} ms"
            for n in SIZES
        )
        print(f"context {context}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
