"""Where two configurations of a FIM run (benchmarks/fim/fim.py) wrote different text for a span:
the first token where they part, and whether the target's logits there nearly tie (within
edgespec.bench.runner.NEAR_TIE of the best: a flip that batch shapes alone cause, as in the
other benchmarks), computed by plain decoding of the same prompt.

    python benchmarks/fim/ties.py RUN.json [--a "edgespec auto"] [--b "edgespec none"]

The texts are tokenized again (the answers carry text, not tokens); a divergence that is only a
different tokenization of the same text would show as no tie.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from edgespec.api import Speculator
from edgespec.bench.runner import near_tie


def divergence(spec: Speculator, span: dict[str, Any], a: str, b: str, n: int) -> dict[str, Any]:
    prompt = spec.infill_prompt(
        span["input_prefix"], span["input_suffix"], middle=span["prompt"], max_tokens=n
    )
    target = spec.target
    ta = list(target.tokenize(a, add_special=False, parse_special=False))
    tb = list(target.tokenize(b, add_special=False, parse_special=False))
    i = next((j for j, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
    if i is None:  # one text is the start of the other: they stopped at different places
        return {"span": span["id"], "position": min(len(ta), len(tb)), "ends_differ": True}
    spec.reset()
    logits = target.decode([*prompt.tokens, *tb[:i]], 1)[0]
    spec.reset()
    gap, tie = near_tie(logits, ta[i], tb[i])
    return {"span": span["id"], "position": i, "gap": gap, "near_tie": tie}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--a", default="edgespec auto")
    p.add_argument("--b", default="edgespec none")
    args = p.parse_args()
    doc = json.loads(args.run.read_text())
    spans = {s["id"]: s for s in doc["spans"]}
    n = int(doc["settings"]["n_predict"])
    rows = []
    with Speculator.load(drafter="none", n_ctx=int(doc["settings"]["ctx_size"])) as spec:
        for sid, runs in doc["runs"].items():
            if runs[args.a]["content"] != runs[args.b]["content"]:
                a, b = runs[args.a]["content"], runs[args.b]["content"]
                rows.append(divergence(spec, spans[sid], a, b, n))
                print(json.dumps(rows[-1]), flush=True)
    ties = sum(1 for r in rows if r.get("near_tie"))
    ends = sum(1 for r in rows if r.get("ends_differ"))
    print(
        f"{len(rows)} of {len(doc['runs'])} spans differ: {ties} at a near-tie, {ends} only in "
        f"where they stop, {len(rows) - ties - ends} otherwise"
    )


if __name__ == "__main__":
    main()
