"""How much the draft's own numbers say about whether the target takes its next token: what a
stop rule could know beyond the draft's probability of the token it proposes.

    PYTHONPATH=. python benchmarks/heavy/replay/signals.py OUTPUTS [TARGET DRAFT]

Greedy, from the draft's two likeliest tokens recorded in OUTPUTS (`scripts/replay_policy.py
--collect-draft`): the log loss of predicting a hit (the draft's first choice is the target's)
from its probability p1 alone, fitted (a logistic curve in logit p1), and with its second
choice's probability and the rest of the mass added. With TARGET and DRAFT, at temperature
0.7, top-p 0.95: the chance the target accepts a drafted token, sum(min(p, q)), against three
signals the draft has (q's largest probability, what edgespec's stop rule reads now; sum(q^2),
the chance that two draws from q agree; q of the token drawn), each through its best power
curve, as the stop rule's calibration fits one (`ConfidencePower`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from carry import kinds_of
from draft_temperature import rows

from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.llamacpp.model import LlamaModel, LoadOptions

EPS = 1e-6


def log_loss(features: np.ndarray, hit: np.ndarray, steps: int = 3000) -> float:
    """The log loss of a logistic regression of `hit` on `features`, fitted by gradient
    descent (a few columns, a few thousand rows)."""
    x = np.column_stack([np.ones(len(hit)), features])
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        w -= 0.5 * x.T @ (p - hit) / len(hit)
    return cross_entropy(1.0 / (1.0 + np.exp(-x @ w)), hit)


def cross_entropy(p: np.ndarray, hit: np.ndarray) -> float:
    """The mean log loss of predicting `hit` with probability `p`."""
    p = np.clip(p, EPS, 1 - EPS)
    return float(-np.mean(hit * np.log(p) + (1 - hit) * np.log(1 - p)))


def greedy(runs: list[dict], kinds: list[str]) -> None:
    for kind in sorted(set(kinds)):
        rec = np.array(
            [
                (d[2], d[3], float(d[0] == t), float(d[1] == t))
                for run, k in zip(runs, kinds, strict=True)
                if k == kind
                for t, d in zip(run["out"], run["draft"], strict=True)
            ]
        )
        p1, p2, hit, second = rec.T
        logit = np.log(np.clip(p1, EPS, 1) / np.clip(1 - p1, EPS, 1))
        log_p2 = np.log(np.clip(p2, EPS, 1))
        rest = np.log(np.clip(1 - p1 - p2, EPS, 1))
        raw = cross_entropy(p1, hit)
        print(
            f"greedy {kind} ({len(hit)} positions): first choice the target's {hit.mean():.3f}, "
            f"the second where the first missed {second.sum() / max(1, (1 - hit).sum()):.3f}; "
            f"log loss p1 as it is {raw:.4f}, fitted {log_loss(logit[:, None], hit):.4f}, "
            f"+ p2 {log_loss(np.column_stack([logit, log_p2]), hit):.4f}, "
            f"+ p2 + the rest {log_loss(np.column_stack([logit, log_p2, rest]), hit):.4f}"
        )


def sampled(runs: list[dict], kinds: list[str], target_path: str, draft_path: str) -> None:
    sampler = Sampler(SamplingParams(temperature=0.7, top_p=0.95, seed=1))
    target = LlamaModel(target_path, LoadOptions(n_ctx=2048))
    draft = LlamaModel(draft_path, LoadOptions(n_ctx=2048))
    by_kind: dict[str, list[tuple[float, ...]]] = {}
    for run, kind in zip(runs, kinds, strict=True):
        t_rows = rows(target, run["prompt"], run["out"])
        d_rows = rows(draft, run["prompt"], run["out"])
        for t_row, d_row in zip(t_rows, d_rows, strict=True):
            p = sampler.probs(t_row)
            q = sampler.probs(d_row[: len(p)])  # a draft may have more tokens than the target
            p = p[: len(q)]
            x = sampler.draw(q)
            by_kind.setdefault(kind, []).append(
                (float(np.minimum(p, q).sum()), float(q.max()), float(q @ q), float(q[x]))
            )
    target.close()
    draft.close()
    for kind, values in sorted(by_kind.items()):
        v = np.array(values)
        chance = v[:, 0]
        print(f"T 0.7 {kind} ({len(chance)} positions): mean chance {chance.mean():.3f}")
        for j, name in ((1, "largest q"), (2, "sum q^2"), (3, "q of the draw")):
            x = np.clip(v[:, j], EPS, 1)
            mse, gamma = min(
                (float(np.mean((x**g - chance) ** 2)), g) for g in np.linspace(0.05, 3, 60)
            )
            print(
                f"  {name:14s} correlation {np.corrcoef(x, chance)[0, 1]:.3f}, squared error "
                f"{mse:.4f} through x^{gamma:.2f}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outputs", type=Path)
    ap.add_argument("models", nargs="*", metavar="TARGET DRAFT", help="for the part at T 0.7")
    args = ap.parse_args()
    if len(args.models) not in (0, 2):
        ap.error("give both TARGET and DRAFT, or neither")
    runs = json.loads(args.outputs.read_text())
    kinds = kinds_of(runs)
    greedy(runs, kinds)
    if args.models:
        sampled(runs, kinds, *args.models)


if __name__ == "__main__":
    main()
