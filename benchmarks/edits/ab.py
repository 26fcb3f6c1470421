"""The replacements a copy makes again (`Edits` in edgespec/engine/suffix.py), on and off in one
process, interleaved with plain decoding, on every prompt of code editing and of the held-out
edits: the record of the 2026-12-01 measurement in docs/benchmarks.md.

    .venv/bin/python docs/bench/edits/ab.py REPEATS OUT.json
"""
import sys, json, statistics, math
from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent, TokenEvent
from _common import edits, spec
items = []
for suite, mt in (("code_editing", 256), ("docs/bench/heldout/heldout_long_editing.jsonl", 512), ("docs/bench/heldout/heldout_code_editing.jsonl", 256)):
    for i, it in enumerate(load_suite(suite)):
        items.append((suite.split("/")[-1].replace(".jsonl", ""), i + 1, it.prompt, mt))
reps = int(sys.argv[1])
results = []
for suite, i, text, mt in items:
    prompt = spec.target.tokenize(spec.target.render_chat([{"role": "user", "content": text}]), add_special=True, parse_special=True)
    runs = {"plain": [], "auto": [], "auto+edits": []}
    outs = {}
    for r in range(reps):
        order = ["plain", "auto", "auto+edits"]
        for name in (order if r % 2 == 0 else order[::-1]):
            edits(name == "auto+edits")
            spec.reset(); out = []; done = None
            for e in spec.stream(prompt, drafter="none" if name == "plain" else "auto", max_tokens=mt):
                if isinstance(e, TokenEvent): out.append(e.token)
                elif isinstance(e, DoneEvent): done = e
            runs[name].append(done.stats.tokens_per_s); outs[name] = out
    med = {k: statistics.median(v) for k, v in runs.items()}
    rec = {"suite": suite, "prompt": i, "tok_s": runs, "same_output": outs["auto"] == outs["plain"] == outs["auto+edits"], "tokens": len(outs["plain"]),
           "edits/auto": med["auto+edits"] / med["auto"], "auto/plain": med["auto"] / med["plain"], "edits/plain": med["auto+edits"] / med["plain"]}
    results.append(rec)
    print(f"{suite} #{i}: plain {med['plain']:.1f} auto {med['auto']:.1f} auto+edits {med['auto+edits']:.1f} tok/s; edits/auto {rec['edits/auto']:.3f}, same output {rec['same_output']}", flush=True)
json.dump(results, open(sys.argv[2], "w"), indent=1)
geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for s in dict.fromkeys(r["suite"] for r in results):
    rs = [r for r in results if r["suite"] == s]
    print(f"{s}: edits/auto {geo([r['edits/auto'] for r in rs]):.3f} ({min(r['edits/auto'] for r in rs):.2f}-{max(r['edits/auto'] for r in rs):.2f}), auto/plain {geo([r['auto/plain'] for r in rs]):.3f}, edits/plain {geo([r['edits/plain'] for r in rs]):.3f} ({min(r['edits/plain'] for r in rs):.2f}-{max(r['edits/plain'] for r in rs):.2f})")
