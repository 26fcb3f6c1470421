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
from functools import partial
from pathlib import Path
from typing import Any

import llama_cpp

from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files, load_registry


class Vocabulary:
    """llama.cpp's vocabulary of a GGUF file, loaded alone (no weights), for llguidance's way."""

    def __init__(self, path: Path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)

    def close(self) -> None:
        llama_cpp.llama_model_free(self.model)


def llguidance_way(model: LlamaModel, vocabulary: Vocabulary) -> Any:
    from llguidance.llamacpp import lltokenizer_from_vocab

    eog = [t for t in range(model.n_vocab) if model.is_eog(t)]
    return lltokenizer_from_vocab(vocabulary.vocab, n_vocab=model.n_vocab, eos_token=eog)


def edgespec_seconds(path: Path) -> float:
    """edgespec's build, timed on a model loaded afresh (built once per model, then kept)."""
    model = LlamaModel(path, LoadOptions(n_ctx=256))
    try:
        return seconds(lambda: model.grammar_tokenizer)
    finally:
        model.close()


def seconds(build: Callable[[], Any]) -> float:
    start = time.perf_counter()
    build()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", help="GGUF files (default: the default pair)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pair = load_registry().default_pair
    paths = args.models or [files.fetch(pair.target).path, files.fetch(pair.draft).path]
    for path in map(Path, paths):
        model = LlamaModel(path, LoadOptions(n_ctx=256))
        vocabulary = Vocabulary(path)
        times: dict[str, list[float]] = {
            "llguidance.llamacpp": [],
            "edgespec": [],
            "edgespec's token bytes alone": [],  # the rest is llguidance's own build
        }
        for _ in range(args.repeats):
            times["llguidance.llamacpp"].append(seconds(partial(llguidance_way, model, vocabulary)))
            times["edgespec"].append(edgespec_seconds(path))
            times["edgespec's token bytes alone"].append(seconds(model.grammar_pieces))
        vocabulary.close()
        model.close()
        medians = {way: statistics.median(t) for way, t in times.items()}
        runs = ", ".join(f"{way} {m:.2f} s" for way, m in medians.items())
        print(f"{path.name}: median of {args.repeats}: {runs}")


if __name__ == "__main__":
    main()
