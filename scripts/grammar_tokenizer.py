"""The first structured request's extra cost: building llguidance's tokenizer for a model,
edgespec's way (ordinary tokens' bytes from the GGUF file) against `llguidance.llamacpp`'s (two
ctypes calls per token) with the end-of-generation scan it needs, interleaved.

    python scripts/grammar_tokenizer.py [MODEL.gguf ...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from edgespec.llamacpp import LlamaModel, LoadOptions
from edgespec.models import files, load_registry


def llguidance_way(model: LlamaModel) -> Any:
    from llguidance.llamacpp import lltokenizer_from_vocab

    eog = [t for t in range(model.n_vocab) if model.is_eog(t)]
    return lltokenizer_from_vocab(model._vocab, n_vocab=model.n_vocab, eos_token=eog)


def edgespec_way(model: LlamaModel) -> Any:
    model.__dict__.pop("grammar_tokenizer", None)  # built again each time, not cached
    return model.grammar_tokenizer


def seconds(build: Callable[[LlamaModel], Any], model: LlamaModel) -> float:
    start = time.perf_counter()
    build(model)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", help="GGUF files (default: the default pair)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pair = load_registry().default_pair
    paths = args.models or [files.fetch(pair.target).path, files.fetch(pair.draft).path]
    for path in paths:
        model = LlamaModel(path, LoadOptions(n_ctx=256))
        times: dict[str, list[float]] = {
            "llguidance.llamacpp": [],
            "edgespec": [],
            "edgespec's token bytes alone": [],  # the rest is llguidance's own build
        }
        for _ in range(args.repeats):
            times["llguidance.llamacpp"].append(seconds(llguidance_way, model))
            times["edgespec"].append(seconds(edgespec_way, model))
            times["edgespec's token bytes alone"].append(seconds(LlamaModel.grammar_pieces, model))
        model.close()
        medians = {way: statistics.median(t) for way, t in times.items()}
        runs = ", ".join(f"{way} {m:.2f} s" for way, m in medians.items())
        print(f"{path.name}: median of {args.repeats}: {runs}")


if __name__ == "__main__":
    main()
