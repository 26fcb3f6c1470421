"""How much memory a model takes at a context size, from GGUF metadata alone.

Resident memory = weights + KV cache + what llama.cpp's compute and output buffers really
touch + the runtime. The compute term is an empirical fit measured here (llama-cpp-python
0.3.36, CPU): llama.cpp reserves n_ubatch x n_vocab floats for the output layer but fills only
the rows whose logits are asked for; what it does touch grows with n_ubatch x n_embd.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import ConfigError
from edgespec.models.gguf import GGUFInfo

KV_BYTES = 2  # F16 cache entries, llama.cpp's default
COMPUTE_FLOATS_PER_UBATCH_EMBD = 24  # fitted: 75 MB (1.5B) and 44 MB (0.5B) at n_ubatch 512
RUNTIME_BYTES = 45_000_000  # Python, numpy and llama.cpp's libraries
SAFETY = 0.90  # plan to use at most this share of the available memory
N_UBATCH = 512


@dataclass(frozen=True)
class ModelMemory:
    name: str
    weights: int
    kv_cache: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute


def model_memory(
    info: GGUFInfo,
    n_ctx: int,
    n_ubatch: int = N_UBATCH,
    gpu_layers_share: float = 0.0,
    flash_attn: bool | None = None,
) -> ModelMemory:
    """Host memory for one model; `gpu_layers_share` of weights and KV live on the GPU instead;
    `flash_attn` False: computed without flash attention (planner.plan._flash_settings)."""
    n_layer = int(info.arch("block_count", 0))
    n_embd = int(info.arch("embedding_length", 0))
    n_head = int(info.arch("attention.head_count", 1) or 1)
    n_head_kv = info.arch("attention.head_count_kv", n_head)
    n_head_kv = int(n_head_kv if not hasattr(n_head_kv, "__len__") else max(n_head_kv))
    head_k = int(info.arch("attention.key_length", n_embd // n_head))
    head_v = int(info.arch("attention.value_length", n_embd // n_head))
    kv = n_layer * n_ctx * n_head_kv * (head_k + head_v) * KV_BYTES
    compute = COMPUTE_FLOATS_PER_UBATCH_EMBD * 4 * n_ubatch * n_embd
    if flash_attn is False:
        # The attention scores of a batch are then a matrix of their own, n_ubatch x n_ctx x
        # n_head floats, touched as the context fills: 60 MB more after a 3500-token prompt in
        # a 4096-token context (1.5B target; this counts 85 MB there, 100 MB when full).
        compute += 4 * n_ubatch * n_ctx * n_head
    host = 1.0 - gpu_layers_share
    return ModelMemory(info.path.name, int(info.weights_bytes * host), int(kv * host), compute)


@dataclass(frozen=True)
class MemoryPlan:
    target: ModelMemory
    draft: ModelMemory | None
    available: int
    runtime: int = RUNTIME_BYTES

    @property
    def budget(self) -> int:
        return int(self.available * SAFETY)

    @property
    def target_only(self) -> int:
        return self.target.total + self.runtime

    @property
    def both(self) -> int:
        return self.target_only + (self.draft.total if self.draft else 0)

    @property
    def decision(self) -> str:
        """ "both" (the model drafter may be used), "target" (draft-free drafters only)."""
        if self.draft is not None and self.both <= self.budget:
            return "both"
        if self.target_only <= self.budget:
            return "target"
        missing = self.target_only - self.budget
        raise ConfigError(
            f"the target needs {self.target_only / 1e9:.2f} GB at this context size but only "
            f"{self.budget / 1e9:.2f} GB can be used ({self.available / 1e9:.2f} GB available, "
            f"{missing / 1e9:.2f} GB missing); choose a smaller pair or a smaller --ctx-size"
        )
