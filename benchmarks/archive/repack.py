"""The target's step and tau with llama.cpp's weight repacking on and off (`use_extra_bufts`:
on the CPU llama.cpp repacks quantized weights into layouts for its own gemv/gemm kernels).
One load per process; run it alternating:

    for r in on off on off; do python repack.py $r; done

Medians of 5 interleaved passes over the sizes, after 256 tokens of context."""

import statistics
import sys
import time
from pathlib import Path

import llama_cpp

from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry

SIZES = (1, 2, 3, 4, 8, 16, 32)
repack = sys.argv[1] == "on"
default_params = llama_cpp.llama_model_default_params


def params() -> llama_cpp.llama_model_params:
    p = default_params()
    p.use_extra_bufts = repack
    return p


llama_cpp.llama_model_default_params = params  # LlamaModel takes llama.cpp's defaults from here
model = LlamaModel(files.fetch(load_registry().default_pair.target).path, LoadOptions(n_ctx=1024))
source = (Path(__file__).parents[2] / "edgespec/auto/policy.py").read_text()
context = model.tokenize(source, add_special=False)[:256]
model.decode(context, 1)
base = model.n_past
seconds: dict[int, list[float]] = {n: [] for n in SIZES}
for _ in range(5):
    for n in SIZES:
        started = time.perf_counter()
        model.decode(context[:n], n)
        seconds[n].append(time.perf_counter() - started)
        model.rewind(base)
step = statistics.median(seconds[1])
taus = " ".join(f"{n}:{statistics.median(seconds[n]) / step:.2f}" for n in SIZES)
print(f"repack {sys.argv[1]:3s}: step {step * 1e3:.1f} ms, tau {taus}")
