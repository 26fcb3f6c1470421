"""What runs where: memory, context size, flash attention and the RPC servers' share."""

from __future__ import annotations

import pytest

from edgespec.errors import ConfigError
from edgespec.llamacpp.rpc_servers import PROTOCOL, Endpoint, ServerInfo
from edgespec.planner.memory import MemoryPlan, ModelMemory, model_memory
from edgespec.planner.resources import choose_resources
from edgespec.system import settings
from tests.machines import hardware


def test_memory_decisions(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    both = choose_resources(hardware(8_000_000_000), t, d)
    assert both.fit == "both" and both.n_ctx == 4096
    # KV cache of the 1.5B geometry at 4096 tokens: 28 layers x 4096 x 2 heads x 256 x 2 bytes.
    assert both.memory.target.kv_cache == 28 * 4096 * 2 * 256 * 2
    need_target = both.memory.target_only
    tight = choose_resources(hardware(int((need_target + 1000) / 0.9)), t, d)
    assert tight.fit == "target"
    kv = both.memory.target.kv_cache
    shrunk = choose_resources(hardware(int((need_target - kv // 2) / 0.9)), t, d)
    assert shrunk.n_ctx < 4096  # no size asked for: the context shrinks to fit
    with pytest.raises(ConfigError, match=r"GB missing"):
        choose_resources(hardware(1_000_000), t, d, n_ctx=4096)
    with pytest.raises(ConfigError, match="training context of 32768"):
        choose_resources(hardware(8_000_000_000), t, d, n_ctx=65536)


def test_memory_plan_message_names_the_numbers() -> None:
    m = ModelMemory("x.gguf", 2_000_000_000, 100_000_000, 50_000_000)
    with pytest.raises(ConfigError) as exc:
        _ = MemoryPlan(m, None, 1_000_000_000).decision
    assert "needs 2.19 GB" in str(exc.value) and "0.90 GB can be used" in str(exc.value)
    assert "1.29 GB missing" in str(exc.value)


@pytest.mark.real
def test_ctx_size_beyond_training_is_refused(real_pair, isolated) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import edgespec

    res = edgespec(
        "run", "hi", "--target", str(real_pair.target), "--ctx-size", "100000", env=isolated
    )
    assert res.returncode == 1 and "training context of 32768 tokens" in res.stderr


def test_flash_attention_is_off_where_the_models_run_on_this_cpu(
    infos, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    cpu = choose_resources(hardware(8_000_000_000), t, d)
    gpu = choose_resources(hardware(8_000_000_000, gpu=True), t, d)
    on_gpu_layers = choose_resources(hardware(8_000_000_000, gpu=True), t, d, n_gpu_layers=0)
    assert cpu.flash_attn is False and on_gpu_layers.flash_attn is False
    # Layers asked for on a build that cannot offload still run on the CPU.
    assert choose_resources(hardware(8_000_000_000), t, d, n_gpu_layers=20).flash_attn is False
    assert gpu.flash_attn is None  # llama.cpp's own choice
    # Without it, a batch's attention scores take n_ubatch x n_ctx x n_head floats more.
    scores = 4 * 512 * 4096 * 12
    assert cpu.memory.target.compute - model_memory(t, 4096).compute == scores
    asked = choose_resources(hardware(8_000_000_000), t, d, flash_attn_asked=True)
    assert asked.flash_attn is True and asked.memory.target == model_memory(t, 4096)
    # EDGESPEC_FLASH_ATTN is what asks.
    monkeypatch.setenv("EDGESPEC_FLASH_ATTN", "0")
    assert settings.flash_attn() is False
    monkeypatch.delenv("EDGESPEC_FLASH_ATTN")
    assert settings.flash_attn() is None
    monkeypatch.setenv("EDGESPEC_FLASH_ATTN", "off")
    with pytest.raises(ConfigError, match="EDGESPEC_FLASH_ATTN must be 0 or 1, not 'off'"):
        settings.flash_attn()


def test_rpc_servers_take_the_target_when_they_have_room(infos) -> None:  # type: ignore[no-untyped-def]
    t, d = infos
    need = model_memory(t, 4096).total  # weights and KV cache, all on the servers
    pi = ServerInfo(Endpoint("pi", 1), PROTOCOL, ((need // 4, need),), 0.001)
    with pytest.raises(ConfigError, match=r"needs .* GB on the RPC servers .*\(pi:1 0\.\d\d GB"):
        choose_resources(hardware(8_000_000_000), t, d, servers=[pi, pi])
    mac = ServerInfo(Endpoint("mac", 2), PROTOCOL, ((3 * need, 4 * need),), 0.001)
    res = choose_resources(hardware(8_000_000_000), t, d, servers=[pi, mac])
    assert res.split == pytest.approx((1 / 13, 12 / 13))
    assert res.n_gpu_layers == -1 and res.draft_gpu_layers == 0
    # The draft computed here goes without flash attention; the servers' llama.cpp decides.
    assert res.flash_attn is False and res.target_flash_attn is None
    # Here only the target's compute buffers count; the draft stays here whole.
    assert res.memory.target.weights == 0 and res.memory.target.kv_cache == 0
    assert res.memory.draft is not None and res.memory.draft.kv_cache > 0
    # With a GPU here, the draft goes on it; the target's layers still go to the servers.
    gpu = choose_resources(hardware(8_000_000_000, gpu=True), t, d, servers=[mac])
    assert gpu.n_gpu_layers == -1 and gpu.draft_gpu_layers == -1
