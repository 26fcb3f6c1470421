"""benchmarks/gpu/random_gguf.py, the GPU check's model writer, at a tiny size: the file it
writes is a Qwen2 model that edgespec's reader and llama.cpp both take, its perturbed copy
differs from it in the output projection alone, and its weights have no offset shared by all
rows (which made every token's state alike before the block signs were random)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import gguf
import numpy as np
import pytest

from edgespec.models.gguf import read_gguf
from tests.conftest import ROOT
from tests.script_module import load_file


@pytest.fixture(scope="module")
def random_gguf() -> ModuleType:
    return load_file(ROOT / "benchmarks" / "gpu" / "random_gguf.py")


def byte_tokenizer() -> dict[str, Any]:
    """GPT-2's byte-level alphabet as a vocabulary, with Qwen's chat specials: enough for
    llama.cpp to load a BPE tokenizer (it looks up the newline among the tokens)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in printable]
    chars = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(shifted)}
    tokens = [chars[b] for b in range(256)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return {
        "model": "gpt2",
        "pre": "qwen2",
        "bos_token_id": 256,
        "eos_token_id": 258,
        "padding_token_id": 256,
        "add_bos_token": False,
        "tokens": tokens,
        "token_type": [1] * 256 + [3] * 3,
        "merges": ["Ġ t"],
        "chat_template": None,
    }


def tiny(module: ModuleType, vocab: int = 300) -> Any:
    return module.Shape(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=vocab)


def tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(str(path)).tensors}


def test_a_written_model_reads_back_with_its_shape_and_padded_vocabulary(
    random_gguf: ModuleType, tmp_path: Path
) -> None:
    shape = tiny(random_gguf)
    path = random_gguf.write_model(tmp_path / "t.gguf", shape, byte_tokenizer())
    info = read_gguf(path)
    assert info.architecture == "qwen2"
    assert (info.arch("block_count"), info.arch("embedding_length")) == (2, 64)
    assert (info.arch("attention.head_count"), info.arch("attention.head_count_kv")) == (4, 2)
    assert info.arch("feed_forward_length") == 96
    assert info.n_vocab == 300  # 259 tokens, padded as the 7B's vocabulary is
    assert info.tokens[-1] == b"[PAD299]" and info.eos_id == 258
    assert info.n_tensors == len(random_gguf.tensors(shape, 30.0)) == 3 + 2 * 12
    assert random_gguf.shape_of(path) == shape


def test_the_perturbed_copy_differs_in_the_output_projection_alone(
    random_gguf: ModuleType, tmp_path: Path
) -> None:
    shape, tok = tiny(random_gguf), byte_tokenizer()
    base = tensors(random_gguf.write_model(tmp_path / "t.gguf", shape, tok))
    copy = tensors(random_gguf.write_model(tmp_path / "p.gguf", shape, tok, perturb=0.03))
    differ = sorted(name for name in base if not np.array_equal(base[name], copy[name]))
    assert differ == ["output.weight"]


def test_weights_have_the_asked_spread_and_no_offset_common_to_all_rows(
    random_gguf: ModuleType, tmp_path: Path
) -> None:
    shape = tiny(random_gguf, vocab=2048)
    path = random_gguf.write_model(tmp_path / "t.gguf", shape, byte_tokenizer(), logit_scale=8.0)
    raw = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    for name, std in (("token_embd.weight", 1.0), ("output.weight", 8.0 / 64**0.5)):
        t = raw[name]
        w = gguf.quants.dequantize(np.array(t.data), t.tensor_type).reshape(-1, 64)
        assert w.std() == pytest.approx(std, rel=0.1)
        # Q4_0's quants -8..7 average -0.5 scales: with one sign for every block, all weights
        # would share that offset (0.11 standard deviations here, 39 standard errors).
        assert abs(w.mean()) < 4 * std / w.size**0.5


def test_llama_cpp_loads_the_model_and_decodes_it(random_gguf: ModuleType, tmp_path: Path) -> None:
    from edgespec.llamacpp.model import LlamaModel

    path = random_gguf.write_model(tmp_path / "t.gguf", tiny(random_gguf), byte_tokenizer())
    model = LlamaModel(path)
    try:
        logits = model.decode([72, 105, 33])
        assert model.n_vocab == 300
        assert np.isfinite(logits).all() and logits[-1].std() > 1.0
    finally:
        model.close()


# --- shapes.py: what the first lent GPU settles in one run, on a fake GPU -----------------------

STEP, FIRST, LONG, GRAPH = 0.008, 0.040, 1.3, 0.8


class FakeGpu:
    """A GPU as shapes.py meets it: n tokens cost STEP x (1 + 0.02 (n - 1)); a size's first run
    costs FIRST more, once per process (`seen`, shared) or per context; from 1,024 tokens of
    context a verification (n > 1) costs LONG times more (Metal's other flash-attention
    kernels); a plain step after two plain steps costs GRAPH of one (a captured CUDA graph)."""

    def __init__(self, clock: Any, n_ctx: int, seen: set[int] | None) -> None:
        self.clock, self.n_ctx = clock, n_ctx
        self.seen = seen if seen is not None else set()
        self.held = 0
        self.last: list[int] = []

    @property
    def n_past(self) -> int:
        return self.held

    def decode(self, tokens: list[int], n_logits: int = 1) -> None:
        n = len(tokens)
        assert self.held + n <= self.n_ctx
        cost = STEP * (1 + 0.02 * (n - 1))
        if n > 1 and self.held >= 1024:
            cost *= LONG
        if n == 1 and self.last[-2:] == [1, 1]:
            cost *= GRAPH
        if n not in self.seen:
            cost += FIRST
        self.seen.add(n)
        self.last.append(n)
        self.clock.now += cost
        self.held += n

    def rewind(self, n_past: int) -> None:
        self.held = n_past

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def shapes() -> ModuleType:
    return load_file(ROOT / "benchmarks" / "gpu" / "shapes.py")


@pytest.mark.parametrize("per_process", [True, False])
def test_the_shapes_check_reads_first_use_long_context_and_graphs_off_a_fake_gpu(
    shapes: ModuleType, per_process: bool
) -> None:
    from tests.fakes import Clock

    clock = Clock()
    process: set[int] = set()
    doc = shapes.shapes(
        lambda n_ctx: FakeGpu(clock, n_ctx, process if per_process else None),
        list(range(5000)),
        clock,
    )
    first = doc["first_use"]
    # Each size's first run: FIRST more than its later runs (a plain step's later runs are
    # graphs, GRAPH of a step cheaper still).
    assert first["8"]["extra_ms"] == pytest.approx(FIRST * 1000)
    assert first["1"]["extra_ms"] == pytest.approx((FIRST + STEP * (1 - GRAPH)) * 1000)
    # A second context pays again only where the cost is per context.
    again = doc["first_use_second_context"]["8"]["extra_ms"]
    assert again == pytest.approx(0 if per_process else FIRST * 1000, abs=1e-6)
    # From 1,024 tokens verification costs LONG times the tau calibration measures at 64.
    for context in ("1024", "4096"):
        ratios = doc["tau_over_calibrations"][context]
        assert ratios["1"] == 1.0 and ratios["8"] == pytest.approx(LONG, rel=1e-3)
    assert doc["tau_by_context"]["64"]["tau"]["32"] == pytest.approx(1.62, rel=1e-3)
    # A plain step between other sizes is no graph: 1 / GRAPH of a repeated one.
    assert doc["graphs"]["between_over_repeated"] == pytest.approx(1 / GRAPH, rel=1e-3)


def test_the_summary_says_each_answer(shapes: ModuleType) -> None:
    from tests.fakes import Clock

    summary = load_file(ROOT / "benchmarks" / "gpu" / "summary.py")
    clock = Clock()
    doc = shapes.shapes(lambda n_ctx: FakeGpu(clock, n_ctx, None), list(range(5000)), clock)
    doc["learned"] = {
        "calibrated_step_ms": 8.0,
        "learned_step_ms": 8.1,
        "learned_over_calibrated": 1.0125,
    }
    text = "\n".join(summary._shapes({"doc": doc, "rc": 0, "stderr_tail": ""}))
    assert "first use, ms more than later runs" in text and "8:+40.0" in text
    assert "tau at 1024 tokens over tau at 64" in text and "8:1.30" in text
    assert "(x1.25)" in text and "auto's plain step" in text and "8.1 ms" in text


def test_the_cuda_compile_jobs_peaks_are_summed_up() -> None:
    check = load_file(ROOT / "benchmarks" / "gpu" / "check.py")
    text = "812000 ggml/src/ggml-cuda/mmq.cu\n2900000 ggml/src/ggml-cuda/fattn.cu\n400000 a.cu\n"
    peaks = check.compile_peaks(text)
    assert peaks == {
        "jobs": 3,
        "max_kib": 2900000,
        "max_file": "ggml/src/ggml-cuda/fattn.cu",
        "median_kib": 812000,
    }
    assert check.compile_peaks("") == {"jobs": 0}
