"""What a draft's proposal (`Sampler.proposal`: its processed distribution without the tokens
less than 1e-4 as likely as its likeliest) changes on the real pair at temperature 0.7 /
top-p 0.95, against drafting from the exact processed distribution (`Sampler.dist`).

    PYTHONPATH=. python benchmarks/overhead/proposal_rows.py TARGET.gguf DRAFT.gguf
        [--tokens 80]

Three answers are sampled from the target (seed 3); at every position both models read the
same context, and for each row: the draft's mass the floor leaves out (of its whole tempered
row), the total variation distance between the two draft distributions, and the chance that
verification accepts the draft's token, sum over x of min(p(x), q(x)), with q the exact
distribution and with the proposal. Verification is exact either way (the token is checked
against the distribution it was drawn from); what can move is how often it is accepted.
"""

from __future__ import annotations

import argparse

import numpy as np

from edgespec.engine.sampling import Dist, Sampler, SamplingParams
from edgespec.llamacpp import LlamaModel, LoadOptions
from edgespec.version import __version__

PROMPTS = [
    "Write a Python function that parses a CSV file and returns the rows as dicts.",
    "Explain in a few sentences why the sky is blue.",
    "Write a short story opening about a lighthouse keeper.",
]


def overlap(p: Dist, q: Dist) -> float:
    """sum over x of min(p(x), q(x)): the chance a token drawn from q is accepted against p."""
    return float(np.minimum(p[q.support], q.values).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--tokens", type=int, default=80, help="tokens per answer")
    args = parser.parse_args()
    target = LlamaModel(args.target, LoadOptions(n_ctx=1024))
    draft = LlamaModel(args.draft, LoadOptions(n_ctx=1024))
    sampler = Sampler(SamplingParams(temperature=0.7, top_p=0.95, seed=3))
    left_out, distance, exact_accept, proposal_accept = [], [], [], []
    for prompt in PROMPTS:
        target.rewind(0)
        draft.rewind(0)
        tokens = target.apply_chat_template([{"role": "user", "content": prompt}])
        t_row, d_row = target.decode(tokens)[0], draft.decode(tokens)[0]
        for _ in range(args.tokens):
            p = sampler.dist(t_row)
            q_exact, q_prop = (
                sampler.dist(d_row[: len(t_row)]),
                sampler.proposal(d_row[: len(t_row)]),
            )
            weights = np.exp((d_row.astype(np.float64) - d_row.max()) / 0.7)
            left_out.append(1.0 - weights[weights >= 1e-4].sum() / weights.sum())
            distance.append(0.5 * np.abs(q_exact.dense() - q_prop.dense()).sum())
            exact_accept.append(overlap(p, q_exact))
            proposal_accept.append(overlap(p, q_prop))
            token = sampler.draw(p)
            if target.is_eog(token):
                break
            t_row, d_row = target.decode([token], 1)[0], draft.decode([token], 1)[0]
    quantiles = [50, 90, 99, 100]
    print(f"edgespec {__version__}; rows {len(left_out)}")
    print(f"draft mass left out, percentiles {quantiles}: {np.percentile(left_out, quantiles)}")
    print(f"TV(exact, proposal), percentiles {quantiles}: {np.percentile(distance, quantiles)}")
    print(
        f"mean acceptance chance: exact q {np.mean(exact_accept):.4f}, "
        f"proposal {np.mean(proposal_accept):.4f}"
    )
    target.close()
    draft.close()


if __name__ == "__main__":
    main()
