"""Peak resident memory of the default pair against the planner's estimate and the budget
"model files + KV caches + 15 %".

    python scripts/measure_memory.py [--ctx 4096 16384]

Each context size runs in a fresh process: load both models, generate 64 tokens with the
draft model drafting, read the process's peak resident set size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

from edgespec.models import files
from edgespec.models.gguf import read_gguf
from edgespec.models.registry import load_registry
from edgespec.planner.memory import RUNTIME_BYTES, model_memory


def child(n_ctx: int) -> None:
    from edgespec.api import Speculator

    spec = Speculator.load(drafter="model", n_ctx=n_ctx)
    spec.generate("Write a Python class for a binary search tree.", drafter="model", max_tokens=64)
    # ru_maxrss is in KiB on Linux.
    print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ctx", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    pair = load_registry().default_pair
    paths = [files.fetch(pair.target).path, files.fetch(pair.draft).path]
    infos = [read_gguf(p) for p in paths]
    rows = []
    for n_ctx in args.ctx:
        run = subprocess.run(
            [sys.executable, __file__, "--child", str(n_ctx)],
            capture_output=True,
            text=True,
            check=True,
        )
        peak = json.loads(run.stdout.strip().splitlines()[-1])["peak_rss"]
        parts = [model_memory(info, n_ctx) for info in infos]
        estimate = sum(p.total for p in parts) + RUNTIME_BYTES
        files_kv = sum(p.stat().st_size for p in paths) + sum(p.kv_cache for p in parts)
        rows.append(
            {
                "n_ctx": n_ctx,
                "peak_rss_mb": round(peak / 1e6, 1),
                "estimate_mb": round(estimate / 1e6, 1),
                "estimate_error": round(estimate / peak - 1, 4),
                "files_plus_kv_mb": round(files_kv / 1e6, 1),
                "peak_over_files_plus_kv": round(peak / files_kv - 1, 4),
            }
        )
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
