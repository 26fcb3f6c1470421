"""What leaving a draft row's far tail out changes on the real pair: the draft's proposal at
temperature 0.7 / top-p 0.95 (`Sampler.proposal`: its processed distribution without the
tokens less than 1e-4 as likely as its likeliest) against the exact processed distribution
(`Sampler.dist`), and greedy, the draft's probability of its token among the head of its row
(`drafters.top_two`) against the whole row's softmax.

    PYTHONPATH=. python benchmarks/overhead/proposal_rows.py TARGET.gguf DRAFT.gguf
        [--tokens 80]

Three answers are sampled from the target (seed 3); at every position both models read the
same context, and for each row: the draft's mass the floor leaves out (of its whole tempered
row), the total variation distance between the two draft distributions, and the chance that
verification accepts the draft's token, sum over x of min(p(x), q(x)), with q the exact
distribution and with the proposal. Verification is exact either way (the token is checked
against the distribution it was drawn from); what can move is how often it is accepted.
Greedy: the draft decodes its own answers (up to `--tokens` each) to the same prompts; for each
row, how much the head's probability of the argmax overstates the softmax's, and the head's
size.
"""

from __future__ import annotations

import argparse

import numpy as np

from edgespec.engine.drafters import top_two
from edgespec.engine.sampling import PROPOSAL_FLOOR, Dist, Sampler, SamplingParams
from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.version import __version__

PROMPTS = [
    "Write a Python function that parses a CSV file and returns the rows as dicts.",
    "Explain in a few sentences why the sky is blue.",
    "Write a short story opening about a lighthouse keeper.",
    "Rename the variable x to count in: def f(x):\n    return x + 1",
]


def overlap(p: Dist, q: Dist) -> float:
    """sum over x of min(p(x), q(x)): the chance a token drawn from q is accepted against p."""
    return float(np.minimum(p[q.support], q.values).sum())


def greedy_heads(draft: LlamaModel, tokens: int) -> None:
    """The draft's greedy answers: the head's probability against the softmax's, per row."""
    over, sizes = [], []
    for prompt in PROMPTS:
        draft.rewind(0)
        row = draft.decode(draft.apply_chat_template([{"role": "user", "content": prompt}]))[0]
        for _ in range(tokens):
            (token, p_head), _ = top_two(row)
            weights = np.exp(row.astype(np.float64) - row.max())
            over.append(p_head * weights.sum() - 1.0)  # p_head / p_softmax - 1
            sizes.append(int((weights >= PROPOSAL_FLOOR).sum()))
            if draft.is_eog(token):
                break
            row = draft.decode([token], 1)[0]
    quantiles = [50, 90, 99, 100]
    print(f"greedy rows {len(over)}")
    print(f"head's probability over the softmax's, percentiles {quantiles}: ", end="")
    print(np.percentile(over, quantiles))
    print(f"tokens in the head, percentiles {quantiles}: {np.percentile(sizes, quantiles)}")


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
    greedy_heads(draft, args.tokens)
    target.close()
    draft.close()


if __name__ == "__main__":
    main()
