"""How many tokens the real target's rows keep at temperature 0.7 / top-p 0.95: what the
instant fake's bank of rows (overhead.py's `logit_bank`) is shaped after.

    PYTHONPATH=. python benchmarks/overhead/real_rows.py TARGET.gguf [--tokens 80]

Three answers are sampled (seed 3); for each row: the tokens top-p keeps, and how many tokens
are at least 1e-2, 1e-4 and 1e-6 as likely as the likeliest (the sampler's candidate floors).
"""

from __future__ import annotations

import argparse

import numpy as np

from edgespec.engine.sampling import Sampler, SamplingParams, support_of
from edgespec.llamacpp.model import LlamaModel, LoadOptions

PROMPTS = [
    "Write a Python function that parses a CSV file and returns the rows as dicts.",
    "Explain in a few sentences why the sky is blue.",
    "Write a short story opening about a lighthouse keeper.",
]
FLOORS = (1e-2, 1e-4, 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("--tokens", type=int, default=80, help="tokens per answer")
    args = parser.parse_args()
    model = LlamaModel(args.target, LoadOptions(n_ctx=1024))
    sampler = Sampler(SamplingParams(temperature=0.7, top_p=0.95, seed=3))
    kept, above = [], []
    for prompt in PROMPTS:
        model.rewind(0)
        logits = model.decode(model.apply_chat_template([{"role": "user", "content": prompt}]))[0]
        for _ in range(args.tokens):
            p = sampler.probs(logits)
            kept.append(len(support_of(p)))
            weights = np.exp((logits.astype(np.float64) - logits.max()) / 0.7)
            above.append([int((weights > f).sum()) for f in FLOORS])
            token = sampler.draw(p)
            if model.is_eog(token):
                break
            logits = model.decode([token], 1)[0]
    quantiles = [50, 75, 90, 95, 99, 100]
    print(f"rows {len(kept)}; tokens kept, percentiles {quantiles}:")
    print(np.percentile(kept, quantiles))
    print(f"tokens above the floors {FLOORS}: median, 95th percentile")
    print(np.median(above, axis=0), np.percentile(above, 95, axis=0))
    model.close()


if __name__ == "__main__":
    main()
