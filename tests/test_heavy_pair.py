"""The heavy pair (`qwen2.5-coder-1.5b-f16`): the default target turned into F16 by llama.cpp's
own quantizer, a target the draft model pays for on any machine, and the default draft in Q4_0.
Both are made from the default pair's verified files (`[models.NAME.derive]`). Speculating with
the draft model on it is lossless, greedy and sampled (temperature 0.7, top-p 0.95), with the
official draft and with the Q4_0 one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgespec.api import Speculator
from edgespec.bench.runner import near_tie
from edgespec.engine.events import TokenEvent
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.errors import FetchError
from edgespec.llamacpp.backend import quantize
from edgespec.models import load_registry, model_ref, read_gguf
from tests.conftest import RealPair
from tests.stats import PASS_P, chi2_pvalue

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def heavy(real_pair: RealPair) -> Iterator[Speculator]:
    target = model_ref("qwen2.5-coder-1.5b-instruct-f16", load_registry()).locate(quantize=quantize)
    spec = Speculator.load(
        target=str(target), draft=str(real_pair.draft), drafter="none", keep_draft=True, n_ctx=1024
    )
    yield spec
    spec.close()


def first_tokens(spec: Speculator, prompt: str, drafter: str, **kw: Any) -> list[int]:
    events = spec.stream(prompt, drafter=drafter, k=4, max_tokens=24, **kw)
    return [e.token for e in events if isinstance(e, TokenEvent)]


def assert_plain_text(spec: Speculator, prompt: str) -> None:
    """The draft model's greedy text is plain decoding's, up to a near-tie flipped."""
    plain = first_tokens(spec, prompt, "none")
    drafted = first_tokens(spec, prompt, "model")
    if drafted != plain:  # llama.cpp's batched kernels may flip a near-tie, nothing else
        i = next(j for j, (a, b) in enumerate(zip(drafted, plain, strict=False)) if a != b)
        spec.reset()
        logits = spec.target.decode(spec.prompt_tokens(prompt) + plain[:i], 1)[0]
        spec.reset()
        assert near_tie(logits, drafted[i], plain[i])[1], (prompt, i)
    assert spec.session.last_stats is not None and spec.session.last_stats.accepted > 0


@pytest.mark.parametrize(
    "prompt",
    ["Write a Python function that returns the n-th Fibonacci number.", "What is a mutex?"],
)
def test_the_draft_model_on_the_heavy_target_gives_plain_decodings_text(
    heavy: Speculator, prompt: str
) -> None:
    assert heavy.target.path.name.endswith("f16-from-q4km.gguf")
    assert_plain_text(heavy, prompt)


def test_the_q4_0_draft_on_the_heavy_target_gives_plain_decodings_text(heavy: Speculator) -> None:
    draft = model_ref("qwen2.5-coder-0.5b-instruct-q4_0", load_registry()).locate(quantize=quantize)
    assert read_gguf(draft).get("general.file_type") == 2  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_0
    spec = Speculator.load(
        target=str(heavy.target.path), draft=str(draft), drafter="none", keep_draft=True, n_ctx=1024
    )
    try:
        assert spec.draft is not None and spec.draft.path == draft
        assert_plain_text(
            spec, "Write a Python function that checks whether a string is a palindrome."
        )
    finally:
        spec.close()


def test_llamacpps_quantizer_makes_the_registrys_q4_0_draft(
    real_pair: RealPair, tmp_path: Path
) -> None:
    out = tmp_path / "draft-q4_0.gguf"
    quantize(real_pair.draft, out, "Q4_0", pure=True)
    spec = load_registry().model("qwen2.5-coder-0.5b-instruct-q4_0")
    # The tensors' types fix the size; the bytes may round otherwise on another CPU or compiler.
    assert out.stat().st_size == spec.size
    assert read_gguf(out).get("general.file_type") == 2
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model")
    with pytest.raises(FetchError, match=r"could not quantize notes\.gguf to Q4_0"):
        quantize(not_gguf, tmp_path / "out.gguf", "Q4_0", pure=True)


def test_sampled_speculation_keeps_the_heavy_targets_first_token_distribution(
    heavy: Speculator,
) -> None:
    params = SamplingParams(temperature=0.7, top_p=0.95)
    tokens = heavy.prompt_tokens("Name a colour. Answer with one word.")
    heavy.reset()
    p = Sampler(params).probs(heavy.target.decode(tokens, 1)[0])
    heavy.reset()
    assert p.max() < 0.9, "the prompt should leave the first token uncertain"
    counts: Counter[int] = Counter()
    for seed in range(120):
        sampling = SamplingParams(temperature=0.7, top_p=0.95, seed=seed)
        events = heavy.stream(tokens, drafter="model", k=3, max_tokens=2, sampling=sampling)
        counts[next(e.token for e in events if isinstance(e, TokenEvent))] += 1
        events.close()
    support = {int(i): float(p[i]) for i in np.nonzero(p > 0)[0]}
    assert chi2_pvalue(counts, support) > PASS_P and len(counts) > 1
