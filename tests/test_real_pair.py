"""Losslessness with the real Qwen2.5-Coder pair: greedy speculation reproduces plain decoding
(except at measured near-ties), and sampling keeps the target's distribution."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from edgespec.bench.runner import near_tie
from edgespec.engine.drafters import ModelDrafter
from edgespec.engine.events import RoundEvent, TokenEvent
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.suffix import SuffixDrafter
from tests.fakes import TreeAlways
from tests.stats import PASS_P, chi2_pvalue

pytestmark = pytest.mark.real

PROMPTS = [
    "Write a Python function that returns the n-th prime number.",
    "Rename the variable `x` to `count` in this code:\n```python\nx = 0\n"
    "for item in items:\n    if item.ok:\n        x += 1\nprint(x)\n```",
    "Explain in two sentences what a hash table is.",
    "Convert this JavaScript to Python:\n```js\nfunction add(a, b) { return a + b; }\n"
    "console.log(add(2, 3));\n```",
    "List five uses of the Unix `find` command, one per line.",
]


def tokens_of(spec, prompt: str, drafter: str, k: int | None = None) -> list[int]:  # type: ignore[no-untyped-def]
    return [
        e.token
        for e in spec.stream(prompt, drafter=drafter, k=k, max_tokens=40)
        if isinstance(e, TokenEvent)
    ]


def assert_same_or_near_tie(spec, prompt: str, out: list[int], plain: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Speculative tokens equal plain decoding's, or first differ where the target's top two
    logits nearly tie (llama.cpp's batched and single-token kernels differ by up to ~0.65
    logits here)."""
    if out == plain:
        return
    i = next(j for j, (a, b) in enumerate(zip(out, plain, strict=False)) if a != b)
    spec.reset()
    logits = spec.target.decode(spec.prompt_tokens(prompt) + plain[:i], 1)[0]
    spec.reset()
    assert near_tie(logits, out[i], plain[i])[1], (prompt, i, out[i], plain[i])


@pytest.mark.parametrize("prompt", PROMPTS, ids=[f"prompt{i}" for i in range(len(PROMPTS))])
def test_greedy_speculation_reproduces_plain_decoding(loaded, prompt: str) -> None:  # type: ignore[no-untyped-def]
    plain = tokens_of(loaded, prompt, "none")
    assert len(plain) >= 10
    for drafter, k in (("model", 4), ("ngram", 8), ("hybrid", 6), ("auto", 32)):
        assert_same_or_near_tie(loaded, prompt, tokens_of(loaded, prompt, drafter, k), plain)


def test_sampling_keeps_the_first_token_distribution(loaded) -> None:  # type: ignore[no-untyped-def]
    prompt = "The three most popular programming languages are Python, Java and"
    params = SamplingParams(temperature=0.8)
    tokens = loaded.prompt_tokens(prompt, raw=True)
    loaded.reset()
    p = Sampler(params).probs(loaded.target.decode(tokens, 1)[0])
    loaded.reset()
    assert p.max() < 0.9, "the prompt should leave the first token uncertain"
    counts: Counter = Counter()  # type: ignore[type-arg]
    n = 150
    for seed in range(n):
        events = loaded.stream(
            tokens,
            drafter="model",
            k=2,
            max_tokens=3,
            sampling=SamplingParams(temperature=0.8, seed=seed),
        )
        first = next(e.token for e in events if isinstance(e, TokenEvent))
        events.close()
        counts[first] += 1
    support = {int(i): float(p[i]) for i in np.nonzero(p > 0)[0]}
    assert chi2_pvalue(counts, support) > PASS_P
    assert len(counts) > 1


# Suffix trees: up to 16 nodes on a chain of 8; the draft model: a chain of up to 4, 3 leaves.
TREE_DRAFTS = {
    "suffix forks": (lambda spec: SuffixDrafter(min_n=1), TreeAlways(8, 16, 4)),
    "model leaves": (lambda spec: ModelDrafter(spec._draft_cache, p_min=0.0), TreeAlways(4, 7, 4)),
}


@pytest.mark.parametrize("kind", sorted(TREE_DRAFTS))
def test_greedy_tree_drafts_reproduce_plain_decoding(loaded, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Trees verified by llama.cpp (a sequence per leaf), from the suffix index's forks or the
    draft model's second choices, give plain decoding's tokens (except at measured
    near-ties), and branches are taken."""
    make_drafter, policy = TREE_DRAFTS[kind]
    trees = taken = 0
    for prompt in PROMPTS:
        plain = tokens_of(loaded, prompt, "none")
        events = list(loaded.stream(prompt, drafter=make_drafter(loaded), k=policy, max_tokens=40))
        out = [e.token for e in events if isinstance(e, TokenEvent)]
        outcomes = [e.tree for e in events if isinstance(e, RoundEvent) and e.tree]
        trees += len(outcomes)
        taken += sum(o.taken for o in outcomes)
        assert_same_or_near_tie(loaded, prompt, out, plain)
    assert trees >= 10 and taken >= 1, (trees, taken)
