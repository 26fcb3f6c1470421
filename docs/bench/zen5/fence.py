"""Copies of 8-11-token matches by whether the answer is inside a fenced code block when the copy
starts (an odd number of ``` in the text so far), and how often the copy's first token was
wrong; per kind of suite (editing or not). Needs the target's vocabulary (the default pair
pulled). The record behind docs/benchmarks.md (2026-12-01).

    .venv/bin/python docs/bench/zen5/fence.py docs/bench/replay-outputs.json docs/bench/heldout/outputs.json
"""
import glob
import json
import os
import sys

import llama_cpp

import edgespec.engine.suffix as sx

sx.COPY_REACH = 1 << 30  # how far a match reaches, uncapped
path = glob.glob(os.path.expanduser("~/.cache/edgespec/models/**/qwen2.5-coder-1.5b*.gguf"), recursive=True)[0]
vocab = llama_cpp.Llama(path, vocab_only=True, verbose=False)
stats: dict[tuple[str, bool], list[int]] = {}
for f in sys.argv[1:]:
    for run in json.load(open(f)):
        kind = "editing" if "edit" in run["suite"] else "other"
        drafter = sx.SuffixDrafter()
        drafter.remember(run["history"])
        prompt, out = run["prompt"], run["out"]
        drafter.begin(prompt)
        for t in range(len(out)):
            context = prompt + out[:t]
            drafter.live.add(context, drafter.live.tokens)
            copy, reach = drafter._copy(context, 48)
            if not copy or reach >= 12:
                continue
            fenced = vocab.detokenize(out[:t]).decode("utf-8", "replace").count("```") % 2 == 1
            s = stats.setdefault((kind, fenced), [0, 0])
            s[0] += 1
            s[1] += copy[0] != out[t]
for (kind, fenced), (n, broke) in sorted(stats.items()):
    where = "inside a fence" if fenced else "outside"
    print(f"{kind:8} {where:15} copies of 8-11-token matches {n:4}, first token wrong {broke / n:.3f}")
