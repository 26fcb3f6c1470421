"""The held-out longer files again, 3 repeats, edits on and off; and where an output left another
run's, the logit gap of the target's top two tokens there (a near-tie or not).

    .venv/bin/python docs/bench/edits/ab_rerun.py
"""
import statistics
import numpy as np
from edgespec.bench.suites import load_suite
from edgespec.engine.events import DoneEvent, TokenEvent
from _common import edits, spec
jobs = [("docs/bench/heldout/heldout_code_editing.jsonl", 2, 256, ["plain", "auto", "auto+edits"], 1)] + \
       [("docs/bench/heldout/heldout_long_editing.jsonl", i, 512, ["auto", "auto+edits"], 3) for i in (1, 2, 3, 4)]
for suite, i, mt, names, reps in jobs:
    text = load_suite(suite)[i - 1].prompt
    prompt = spec.target.tokenize(spec.target.render_chat([{"role": "user", "content": text}]), add_special=True, parse_special=True)
    runs = {n: [] for n in names}; outs = {}
    for r in range(reps):
        for name in (names if r % 2 == 0 else names[::-1]):
            edits(name == "auto+edits")
            spec.reset(); out = []
            for e in spec.stream(prompt, drafter="none" if name == "plain" else "auto", max_tokens=mt):
                if isinstance(e, TokenEvent): out.append(e.token)
                elif isinstance(e, DoneEvent): runs[name].append(e.stats.tokens_per_s)
            outs.setdefault(name, []).append(out)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(suite.split("/")[-1], i, {k: [round(x, 1) for x in v] for k, v in runs.items()}, "edits/auto %.3f" % (med["auto+edits"] / med["auto"]), flush=True)
    ref_out = outs[names[0]][0]
    for name, os_ in outs.items():
        for o in os_:
            if o != ref_out:
                d = next((j for j, (a, b) in enumerate(zip(o, ref_out)) if a != b), min(len(o), len(ref_out)))
                spec.reset(); tgt = spec.target; tgt.rewind(0)
                logits = tgt.decode(prompt + ref_out[:d])[-1]
                top = np.sort(logits)[-2:]
                print(f"  {name} differs from {names[0]} at token {d}: logit gap of the top two there {top[1]-top[0]:.3f}", flush=True)
