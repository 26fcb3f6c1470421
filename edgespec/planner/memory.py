"""How much memory a model takes at a context size, from GGUF metadata alone: weights, KV
cache, what llama.cpp's compute buffers touch, and the runtime. The offloaded layers' share
counts against the GPU's memory instead (and the RAM too where the GPU computes from it)."""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import ConfigError
from edgespec.models.gguf import GGUFInfo

KV_BYTES = 2  # F16 cache entries, llama.cpp's default
# What the CPU compute buffers touch grows with n_ubatch x n_embd (the output rows are filled
# only where logits are asked for): fitted, with no run recorded (docs/tuning.md, Compute buffers).
COMPUTE_FLOATS_PER_UBATCH_EMBD = 24
RUNTIME_BYTES = 45_000_000  # Python, numpy and llama.cpp's libraries
SAFETY = 0.90  # plan to use at most this share of the available memory
N_UBATCH = 512  # the models' n_ubatch: LoadOptions.n_batch, which llama.cpp takes as both


@dataclass(frozen=True)
class ModelMemory:
    """One model's bytes in RAM and (gpu_*) where its offloaded layers go: GPU or RPC servers."""

    name: str
    weights: int
    kv_cache: int
    compute: int
    gpu_weights: int = 0
    gpu_kv_cache: int = 0
    gpu_compute: int = 0
    gpu_layers: int = 0  # offloaded, counted as llama.cpp counts them (offloaded_layers)
    layers: int = 0  # all it can offload: the repeating layers and the output layer

    @property
    def total(self) -> int:
        """In RAM."""
        return self.weights + self.kv_cache + self.compute

    @property
    def gpu(self) -> int:
        return self.gpu_weights + self.gpu_kv_cache + self.gpu_compute


def offloaded_layers(n_layer: int, n_gpu_layers: int) -> int:
    """How many of a model's n_layer + 1 layers llama.cpp offloads for `n_gpu_layers` (negative:
    all): the output layer first, then the repeating ones (llama-model.cpp, load_tensors)."""
    return n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)


def model_memory(
    info: GGUFInfo,
    n_ctx: int,
    gpu_layers: int = 0,
    flash_attn: bool | None = None,
) -> ModelMemory:
    """Memory for one model with `gpu_layers` offloaded (-1: all). The metadata does not divide
    the bytes between layers: the GPU gets the offloaded share of them and of the KV cache."""
    n_layer = int(info.arch("block_count", 0))
    n_embd = int(info.arch("embedding_length", 0))
    n_head = int(info.arch("attention.head_count", 1) or 1)
    n_head_kv = info.arch("attention.head_count_kv", n_head)
    n_head_kv = int(n_head_kv if not hasattr(n_head_kv, "__len__") else max(n_head_kv))
    head_k = int(info.arch("attention.key_length", n_embd // n_head))
    head_v = int(info.arch("attention.value_length", n_embd // n_head))
    kv = n_layer * n_ctx * n_head_kv * (head_k + head_v) * KV_BYTES
    compute = COMPUTE_FLOATS_PER_UBATCH_EMBD * 4 * N_UBATCH * n_embd
    if flash_attn is False:
        # A batch's attention scores are then a matrix of their own, touched as the context fills.
        compute += 4 * N_UBATCH * n_ctx * n_head
    offloaded = offloaded_layers(n_layer, gpu_layers)
    gpu_weights = info.weights_bytes * offloaded // (n_layer + 1)
    gpu_kv = kv * max(offloaded - 1, 0) // max(n_layer, 1)
    # A GPU backend allocates its compute buffer whole, with a full batch's logits (the output
    # layer goes first); the attention scores, never live with them, reuse it rather than add
    # (checked against llama.cpp's own count: docs/tuning.md, Compute buffers). The backend's
    # pools are not counted.
    largest = max(info.n_vocab, n_ctx * n_head if flash_attn is False else 0)
    gpu_compute = 4 * N_UBATCH * (largest + 2 * n_embd) if offloaded else 0
    return ModelMemory(
        info.path.name,
        info.weights_bytes - gpu_weights,
        kv - gpu_kv,
        compute,
        gpu_weights,
        gpu_kv,
        gpu_compute,
        offloaded,
        n_layer + 1,
    )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


@dataclass(frozen=True)
class MemoryPlan:
    """What the models need against the RAM and free GPU memory (`vram`; None: unreported);
    `unified`: the GPU computes from the RAM, which then holds both."""

    target: ModelMemory
    draft: ModelMemory | None
    available: int
    runtime: int = RUNTIME_BYTES
    vram: int | None = None
    unified: bool = False
    target_on_servers: bool = False  # the target's offloaded share is on RPC servers

    @property
    def budget(self) -> int:
        return int(self.available * SAFETY)

    @property
    def vram_budget(self) -> int | None:
        return None if self.vram is None else int(self.vram * SAFETY)

    def in_ram(self, m: ModelMemory, on_servers: bool = False) -> int:
        return m.total + (m.gpu if self.unified and not on_servers else 0)

    @property
    def target_only(self) -> int:
        """RAM for the target alone."""
        return self.in_ram(self.target, self.target_on_servers) + self.runtime

    @property
    def both(self) -> int:
        """RAM for both models."""
        return self.target_only + (self.in_ram(self.draft) if self.draft else 0)

    @property
    def target_vram(self) -> int:
        return 0 if self.target_on_servers else self.target.gpu

    @property
    def both_vram(self) -> int:
        return self.target_vram + (self.draft.gpu if self.draft else 0)

    def short(self, ram: int, vram: int) -> list[str]:
        """Which memory is short for needing `ram` and `vram` bytes, by how much."""
        short = []
        if ram > self.budget:
            short.append(
                f"{_gb(ram)} of RAM where {_gb(self.budget)} can be used ({_gb(self.available)}"
                f" available, {_gb(ram - self.budget)} missing)"
            )
        budget = self.vram_budget
        if budget is not None and vram > budget:
            short.append(
                f"{_gb(vram)} of GPU memory where {_gb(budget)} can be used ({_gb(vram - budget)}"
                " missing)"
            )
        return short

    @property
    def draft_shortage(self) -> str:
        """Why the draft does not fit next to the target ("" when it does)."""
        return " and ".join(self.short(self.both, self.both_vram))

    @property
    def decision(self) -> str:
        """ "both" (the model drafter may be used), "target" (draft-free drafters only)."""
        if self.draft is not None and not self.draft_shortage:
            return "both"
        short = self.short(self.target_only, self.target_vram)
        if not short:
            return "target"
        raise ConfigError(
            f"the target needs {' and '.join(short)} at this context size; choose a smaller "
            "pair or a smaller --ctx-size"
        )
