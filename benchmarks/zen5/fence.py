"""Copies of 8-11-token matches by whether the answer is inside a fenced code block when the copy
starts (an odd number of ``` in the text so far), and how often the copy's first token was
wrong; per kind of suite (editing or not). Needs the target's vocabulary (the default pair
pulled). The record behind benchmarks/HISTORY.md (2026-12-01).

    PYTHONPATH=.:benchmarks/zen5 .venv/bin/python benchmarks/zen5/fence.py \
        benchmarks/zen5/outputs.json benchmarks/heldout/outputs.json
"""

import sys

import llama_cpp
from _copies import copies

from edgespec.models import files
from edgespec.models.registry import load_registry

target = files.fetch(load_registry().default_pair.target).path
vocab = llama_cpp.Llama(str(target), vocab_only=True, verbose=False)
stats: dict[tuple[str, bool], list[int]] = {}
for run, t, copy, reach in copies(sys.argv[1:], lambda suite: True):
    if reach >= 12:
        continue
    out = run["out"]
    kind = "editing" if "edit" in run["suite"] else "other"
    fenced = vocab.detokenize(out[:t]).decode("utf-8", "replace").count("```") % 2 == 1
    s = stats.setdefault((kind, fenced), [0, 0])
    s[0] += 1
    s[1] += copy[0] != out[t]
for (kind, fenced), (n, broke) in sorted(stats.items()):
    where = "inside a fence" if fenced else "outside"
    print(
        f"{kind:8} {where:15} copies of 8-11-token matches {n:4}, first token wrong {broke / n:.3f}"
    )
