"""Whether reading the weights into memory (edgespec's load) or mapping the file (llama.cpp's
own default) changes the decode speed: one model per process, loaded one way, 96 greedy tokens
after first_load.py's prompt, three times; the median milliseconds a token. Run it several
times alternating the modes: each run is a new process.

    PYTHONPATH=. python benchmarks/overhead/load_mode.py none|mmap [TARGET.gguf] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import llama_cpp

from edgespec.models import files
from edgespec.models.registry import load_registry

sys.path.insert(0, str(Path(__file__).parent))
import first_load

MODES = {"none": llama_cpp.LLAMA_LOAD_MODE_NONE, "mmap": llama_cpp.LLAMA_LOAD_MODE_MMAP}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("target", nargs="?", help="a GGUF (default: the default pair's target)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    path = args.target or str(files.fetch(load_registry().default_pair.target).path)
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.load_mode = MODES[args.mode]
    model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_threads, cparams.n_threads_batch = 4096, args.threads, args.threads
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    values = [first_load.ms_a_token(model, ctx) for _ in range(3)]
    shown = ", ".join(f"{v:.1f}" for v in values)
    print(f"{args.mode}: {statistics.median(values):.1f} ms a token ({shown})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
