"""How often a sampled target accepts a draft token, by the distribution the draft proposes from.

    PYTHONPATH=. python benchmarks/heavy/replay/draft_temperature.py OUTPUTS TARGET DRAFT
        [--temperature 0.7] [--top-p 0.95]

At every position of the recorded outputs, with the target's processed distribution p (the
temperature and top-p a user asked for) and a proposal q, rejection sampling accepts the drafted
token with probability sum(min(p, q)), whatever q is: the output stays p. edgespec's draft
proposes from its own distribution processed as the target's (q at the same temperature);
llama.cpp's draft-simple proposes its likeliest token, which a sampled target keeps with
probability p(that token). Also listed: q at a lower temperature, sharper where the small draft
is flatter than the target. Means over positions, per kind of prompt (code / prose), on the
target's greedy texts (the contexts a sampled text would see differ a little).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from carry import kinds_of

from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.llamacpp.model import LlamaModel, LoadOptions

FACTORS = (1.0, 0.75, 0.5, 0.25)  # the draft's temperature, times the target's


def rows(model: LlamaModel, prompt: list[int], out: list[int]) -> np.ndarray:
    model.rewind(0)
    return model.decode(prompt + out[:-1], len(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outputs")
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    args = ap.parse_args()
    runs = json.loads(Path(args.outputs).read_text())
    kinds = kinds_of(runs)
    target_sampler = Sampler(SamplingParams(temperature=args.temperature, top_p=args.top_p))
    proposals = {
        f"q at {f:g} T": Sampler(SamplingParams(temperature=args.temperature * f, top_p=args.top_p))
        for f in FACTORS
    }
    accepted: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    target = LlamaModel(args.target, LoadOptions(n_ctx=2048))
    draft = LlamaModel(args.draft, LoadOptions(n_ctx=2048))
    for run, kind in zip(runs, kinds, strict=True):
        t_rows = rows(target, run["prompt"], run["out"])
        d_rows = rows(draft, run["prompt"], run["out"])
        for t_row, d_row in zip(t_rows, d_rows, strict=True):
            p = target_sampler.probs(t_row)
            d_row = d_row[: len(p)]  # a draft may have more tokens than the target
            accepted[kind]["likeliest token"].append(float(p[int(np.argmax(d_row))]))
            for name, sampler in proposals.items():
                q = sampler.probs(d_row)
                accepted[kind][name].append(float(np.minimum(p[: len(q)], q).sum()))
    target.close()
    draft.close()
    print(f"target at T {args.temperature}, top-p {args.top_p}; {len(runs)} outputs")
    for kind, by_name in accepted.items():
        means = {name: round(float(np.mean(v)), 4) for name, v in by_name.items()}
        print(f"{kind} ({len(next(iter(by_name.values())))} positions): {means}")


if __name__ == "__main__":
    main()
