"""Memory budgeted per device: what is offloaded counts against the GPU's memory (and against
the RAM too where the GPU computes from it), a partial offload by its share of the layers, and
the draft's layers are decided apart from the target's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from edgespec.cli import loading
from edgespec.cli.app import app
from edgespec.errors import ConfigError
from edgespec.models.gguf import GGUFInfo, read_gguf
from edgespec.options import Drafting
from edgespec.planner.decide import decide
from edgespec.planner.memory import model_memory, offloaded_layers
from edgespec.planner.resources import Fit, choose_resources
from tests.fakes import fake_plan
from tests.gguf_files import write_model_gguf
from tests.machines import apple_mac, cuda_pc, hardware

GB = 1_000_000_000
# Qwen2.5-Coder's shapes (layers, width, heads, KV heads, vocabulary); the two small files'
# sizes are the registry's (models.toml), the large ones any size past the machines' memory.
SHAPES = {
    "0.5b": (24, 896, 14, 2, 151936, 491_400_064),
    "1.5b": (28, 1536, 12, 2, 151936, 1_117_320_768),
    "14b": (48, 5120, 40, 8, 152064, 9 * GB),
    "32b": (64, 5120, 40, 8, 152064, 20 * GB),
}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GGUFInfo]:
    folder = tmp_path_factory.mktemp("qwen")
    infos = {}
    for name, (n_layer, n_embd, n_head, n_head_kv, n_vocab, weights) in SHAPES.items():
        path = write_model_gguf(
            folder / f"qwen2.5-coder-{name}.gguf",
            n_layer=n_layer,
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=n_head_kv,
            n_vocab=n_vocab,
            weights=weights,
        )
        infos[name] = read_gguf(path)
    return infos


def test_a_metal_mac_with_0_6_gb_free_is_not_told_both_fit(qwen: dict[str, GGUFInfo]) -> None:
    t, d = qwen["1.5b"], qwen["0.5b"]
    # What Metal holds is the RAM: with 0.6 GB of it free not even the target fits.
    with pytest.raises(ConfigError, match=r"needs \d\.\d\d GB of RAM where 0\.54 GB can be used"):
        choose_resources(apple_mac(8 * GB, 600_000_000, 5 * GB), t, d)
    # RAM to spare, but only 0.6 GB of the GPU's working set left: fewer layers go there.
    res = choose_resources(apple_mac(8 * GB, 6 * GB, 600_000_000), t, d)
    assert res.fit is Fit.BOTH
    assert 0 < res.n_gpu_layers < 29 and res.draft_gpu_layers == 0
    assert res.memory.both_vram <= 0.9 * 600_000_000
    # Both models whole in the RAM: what is on the GPU is in it too.
    assert res.memory.both > t.weights_bytes + d.weights_bytes
    assert any(f"{res.n_gpu_layers} of qwen2.5-coder-1.5b.gguf's 29" in n for n in res.notes)


def test_an_8_gb_cuda_card_is_not_told_the_14b_pair_fits(qwen: dict[str, GGUFInfo]) -> None:
    t, d = qwen["14b"], qwen["0.5b"]
    card = cuda_pc(7_600_000_000, 24 * GB)
    res = choose_resources(card, t, d)
    mem = res.memory
    assert 0 < res.n_gpu_layers < 49  # not all of them
    assert mem.vram_budget == int(0.9 * 7_600_000_000) and mem.both_vram <= mem.vram_budget
    # The layers left on the CPU are in the RAM: the weights' share and their KV cache.
    off = mem.target.gpu_layers
    assert mem.target.weights == t.weights_bytes - t.weights_bytes * off // 49
    assert mem.target.kv_cache > 0 and res.fit is Fit.BOTH
    (note,) = [n for n in res.notes if "14b" in n]
    assert f"{off} of qwen2.5-coder-14b.gguf's 49 layers on the GPU" in note
    # Asked for all of them, it is refused with the numbers and what fits.
    with pytest.raises(ConfigError, match=rf"missing\); {off} layers fit .* --gpu-layers {off},"):
        choose_resources(card, t, d, n_gpu_layers=-1)


def test_the_32b_pair_does_not_fit_a_16_gb_mac(qwen: dict[str, GGUFInfo]) -> None:
    mac = apple_mac(16 * GB, 11 * GB, 11_400_000_000)
    with pytest.raises(ConfigError, match=r"of RAM where 9\.90 GB can be used") as err:
        choose_resources(mac, qwen["32b"], qwen["0.5b"])
    assert "missing" in str(err.value)
    # The 1.5B pair fits there whole, on the GPU.
    res = choose_resources(mac, qwen["1.5b"], qwen["0.5b"])
    assert res.fit is Fit.BOTH and res.n_gpu_layers == res.draft_gpu_layers == -1


def test_a_partial_offload_counts_only_its_share(infos: tuple[GGUFInfo, GGUFInfo]) -> None:
    t, d = infos
    t = replace(t, file_bytes=t.header_bytes + 1_100_000_000)
    full = model_memory(t, 4096)
    res = choose_resources(hardware(8 * GB, gpu=True), t, d, n_gpu_layers=10)
    target = res.memory.target
    # llama.cpp's count: the output layer first, then 9 of the 28 repeating layers.
    assert (target.gpu_layers, target.layers) == (10, 29)
    assert target.weights == full.weights - full.weights * 10 // 29
    assert target.kv_cache == full.kv_cache - full.kv_cache * 9 // 28
    assert target.gpu_kv_cache + target.kv_cache == full.kv_cache
    assert offloaded_layers(28, 1) == 1 and model_memory(t, 4096, gpu_layers=1).gpu_kv_cache == 0
    assert offloaded_layers(28, -1) == offloaded_layers(28, 100) == 29


def test_the_drafts_layers_are_decided_apart_from_the_targets(
    infos: tuple[GGUFInfo, GGUFInfo], qwen: dict[str, GGUFInfo]
) -> None:
    t, d = infos
    # --gpu-layers N is the target's: the draft gets what the GPU can hold (here, all of it).
    res = choose_resources(hardware(8 * GB, gpu=True), t, d, n_gpu_layers=10)
    assert res.n_gpu_layers == 10 and res.draft_gpu_layers == -1
    assert choose_resources(hardware(8 * GB, gpu=True), t, d, n_gpu_layers=0).draft_gpu_layers == 0
    # On the 8 GB card 30 of the 14B's layers leave room for part of the draft only.
    card = cuda_pc(7_600_000_000, 24 * GB)
    res = choose_resources(card, qwen["14b"], qwen["0.5b"], n_gpu_layers=30)
    draft = res.memory.draft
    assert draft is not None and 0 < res.draft_gpu_layers == draft.gpu_layers < 25
    assert res.memory.both_vram <= (res.memory.vram_budget or 0)
    assert any(f"{res.draft_gpu_layers} of qwen2.5-coder-0.5b.gguf's 25" in n for n in res.notes)


def test_loading_gives_each_model_its_own_layers(
    qwen: dict[str, GGUFInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgespec.buildcheck import smoke
    from edgespec.llamacpp import model as llamacpp
    from edgespec.planner import load

    loaded: dict[str, int] = {}

    def model(path: Path, options: Any) -> Path:
        loaded[Path(path).name] = options.n_gpu_layers
        return path

    monkeypatch.setattr(llamacpp, "LlamaModel", model)
    monkeypatch.setattr(smoke, "ensure_works", lambda path, note, gpu_layers=0: None)
    t, d = qwen["14b"], qwen["0.5b"]
    res = choose_resources(cuda_pc(7_600_000_000, 24 * GB), t, d, n_gpu_layers=30)
    load.load_models(t.path, d.path, res, None)
    assert loaded == {t.path.name: 30, d.path.name: res.draft_gpu_layers}


def test_plan_prints_the_gpu_memory_and_what_was_given_up(
    qwen: dict[str, GGUFInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    res = choose_resources(cuda_pc(7_600_000_000, 24 * GB), qwen["14b"], qwen["0.5b"])
    monkeypatch.setattr(
        loading, "plan_only", lambda options, drafting: replace(fake_plan(), resources=res)
    )
    out = CliRunner().invoke(app, ["plan"]).stdout
    assert (
        "GPU memory CUDA0 (NVIDIA GeForce RTX 4060, 7.60 GB free of 8.00 GB): 6.84 GB usable"
    ) in out
    assert f"{res.n_gpu_layers} of qwen2.5-coder-14b.gguf's 49 layers on the GPU" in out
    assert f"{res.n_gpu_layers} of the target's layers on the GPU" in out
    doc = replace(fake_plan(), resources=res).to_json()["memory"]
    assert doc["gpu"]["budget"] == 6_840_000_000 and not doc["gpu"]["unified"]
    assert doc["target"]["gpu"]["layers"] == res.n_gpu_layers


def test_what_does_not_fit_says_which_memory_is_short_and_what_was_chosen(
    qwen: dict[str, GGUFInfo],
) -> None:
    """On a Mac, what Metal holds is the RAM: short of it, the context shrinks and the draft
    is left out, each with the memory that is short and by how much."""
    t, d = qwen["1.5b"], qwen["0.5b"]
    roomy = choose_resources(apple_mac(8 * GB, 8 * GB, 5 * GB), t, d).memory
    kv = roomy.target.kv_cache + roomy.target.gpu_kv_cache
    tight = apple_mac(8 * GB, int((roomy.target_only - kv // 4) / 0.9), 5 * GB)
    res = choose_resources(tight, t, d)
    assert res.n_ctx == 2048 and res.fit is Fit.TARGET and res.n_gpu_layers == -1
    assert res.notes[0].startswith("context 2048 tokens instead of 4096: at 4096 the target ")
    assert "GB of RAM where" in res.notes[0] and "missing" in res.notes[0]
    plan = decide(Drafting.of("ngram"), t.path, d.path, res)
    assert plan.draft is None
    assert plan.draft_reason.startswith("the draft model does not fit next to the target: both")
    assert "GB of RAM where" in plan.draft_reason and "missing" in plan.draft_reason
