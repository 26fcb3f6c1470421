"""Context, threads and where each model's layers go (this machine's GPU, its RPC servers),
from hardware and GGUF metadata alone: `choose_resources`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from edgespec.errors import ConfigError
from edgespec.llamacpp.rpc_servers import ServerInfo
from edgespec.llamacpp.rpc_servers import split as rpc_split
from edgespec.models.gguf import GGUFInfo
from edgespec.planner.memory import SAFETY, MemoryPlan, ModelMemory, model_memory
from edgespec.system.device import Hardware

DEFAULT_CTX = 4096
MIN_CTX = 512
# The most slots a server gets unasked (`--parallel`): four sequences whose passes are shared.
DEFAULT_SLOTS = 4


class Fit(str, Enum):
    """What fits in memory."""

    BOTH = "both"  # target and draft: the model drafter may be used
    TARGET = "target"  # the target only: draft-free drafters


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Memory decision and settings, before any weights are loaded."""

    hardware: Hardware
    memory: MemoryPlan
    fit: Fit
    n_ctx: int
    n_threads: int
    n_gpu_layers: int  # on the RPC servers when there are any, else on this machine's GPU
    servers: tuple[ServerInfo, ...] = ()  # `--rpc`: the target's layers go there
    split: tuple[float, ...] = ()  # the share of each server device
    flash_attn: bool | None = None  # for the models computed here (None: llama.cpp decides)
    target_flash_attn: bool | None = None
    draft_gpu_layers: int = 0  # on this machine's GPU (-1: all), in what the target leaves
    notes: tuple[str, ...] = ()  # what was given up for memory (layers, context), and why
    slots: int = 1  # sequences of n_ctx positions in both caches (a server's slots)


def _flash_settings(
    asked: bool | None, local_on_gpu: bool, servers: Sequence[ServerInfo]
) -> tuple[bool | None, bool | None]:
    """Flash attention for the models computed here and for the target (None: llama.cpp's
    choice): as asked, else off on this CPU, whose flash kernel reads the whole KV cache once
    per row of a verification (measured: docs/tuning.md, Flash attention on the CPU); llama.cpp's
    choice on RPC servers."""
    local = asked if asked is not None else (None if local_on_gpu else False)
    return local, (asked if servers else local)


def _check_servers(servers: Sequence[ServerInfo], need: ModelMemory) -> None:
    free = sum(s.free for s in servers)
    if need.total > free * SAFETY:
        each = ", ".join(f"{s.endpoint} {s.free / 1e9:.2f} GB" for s in servers)
        raise ConfigError(
            f"the target needs {need.total / 1e9:.2f} GB on the RPC servers but they have "
            f"{free / 1e9:.2f} GB free ({each}); add a server or choose a smaller --ctx-size"
        )


def _check_ctx(target: GGUFInfo, n_ctx: int | None) -> int:
    """The target's training context (0: unknown), once `n_ctx` is checked against it."""
    train_ctx = int(target.arch("context_length", 0) or 0)
    if n_ctx is not None:
        if train_ctx and n_ctx > train_ctx:
            raise ConfigError(
                f"--ctx-size {n_ctx} exceeds {target.path.name}'s training context of "
                f"{train_ctx} tokens",
                field="n_ctx",
            )
        if n_ctx < 16:
            raise ConfigError(f"--ctx-size must be at least 16 tokens, got {n_ctx}", field="n_ctx")
    return train_ctx


def _gpu_memory(hardware: Hardware) -> tuple[int | None, bool]:
    """The free memory of all GPUs (llama.cpp spreads layers over them; None: no GPU takes
    layers, or none says) and whether it is the RAM itself (Apple, integrated GPUs)."""
    if not hardware.gpu_offload or not hardware.gpus:
        return None, False
    return sum(g.free for g in hardware.gpus), any(g.unified for g in hardware.gpus)


def _layers_that_fit(info: GGUFInfo, ctx: int, room: int, flash: bool | None) -> int:
    """The most layers of `info` whose share fits in `room` bytes of GPU memory (-1: all)."""
    n_layer = int(info.arch("block_count", 0))
    fits = 0
    for n in range(1, n_layer + 2):
        if model_memory(info, ctx, gpu_layers=n, flash_attn=flash).gpu > room:
            break
        fits = n
    return -1 if fits == n_layer + 1 else fits


@dataclass(frozen=True)
class _Placement:
    """Where the layers go at one context size, and what that takes."""

    ctx: int
    memory: MemoryPlan
    target_layers: int
    draft_layers: int


@dataclass(frozen=True)
class _Placer:
    """Places the target's layers (as `--gpu-layers` asks, else as many as fit), then the
    draft's in what is left: every token passes through the target, and the calibration
    measures whether the draft still pays as placed."""

    hardware: Hardware
    target: GGUFInfo
    draft: GGUFInfo | None
    asked: int | None  # --gpu-layers
    servers: tuple[ServerInfo, ...]
    local_flash: bool | None
    target_flash: bool | None

    @property
    def vram_budget(self) -> int | None:
        vram = _gpu_memory(self.hardware)[0]
        return None if vram is None else int(vram * SAFETY)

    def _target_layers(self, ctx: int) -> int:
        budget = self.vram_budget
        if self.servers or (self.hardware.gpu_offload and self.asked is not None):
            return -1 if self.asked is None else self.asked
        if not self.hardware.gpu_offload:
            return 0
        return (
            -1 if budget is None else _layers_that_fit(self.target, ctx, budget, self.target_flash)
        )

    def _draft_layers(self, ctx: int, room: int | None) -> int:
        if self.draft is None or not self.hardware.gpu_offload or self.asked == 0:
            return 0
        return -1 if room is None else _layers_that_fit(self.draft, ctx, room, self.local_flash)

    def place(self, ctx: int) -> _Placement:
        vram, unified = _gpu_memory(self.hardware)
        t_layers = self._target_layers(ctx)
        target = model_memory(self.target, ctx, gpu_layers=t_layers, flash_attn=self.target_flash)
        budget = self.vram_budget
        room = None if budget is None else budget - (0 if self.servers else target.gpu)
        d_layers = self._draft_layers(ctx, room)
        draft = None
        if self.draft is not None:
            draft = model_memory(self.draft, ctx, gpu_layers=d_layers, flash_attn=self.local_flash)
        memory = MemoryPlan(
            target,
            draft,
            self.hardware.available_ram,
            vram=vram,
            unified=unified,
            target_on_servers=bool(self.servers),
        )
        return _Placement(ctx, memory, t_layers, d_layers)

    def check_asked(self, placed: _Placement) -> None:
        """`--gpu-layers N` that the GPU's memory cannot hold is refused, with what fits."""
        budget = self.vram_budget
        need = placed.memory.target_vram
        if self.asked is None or budget is None or need <= budget:
            return
        ctx = placed.ctx
        fits = _layers_that_fit(self.target, ctx, budget, self.target_flash)
        raise ConfigError(
            f"--gpu-layers {self.asked} puts {need / 1e9:.2f} GB of the target on the GPU but "
            f"{budget / 1e9:.2f} GB of its memory can be used ({(need - budget) / 1e9:.2f} GB "
            f"missing); {fits} layers fit at a context of {ctx} tokens: use --gpu-layers {fits}, "
            "or leave it out and the plan chooses",
            field="n_gpu_layers",
        )

    def notes(self, placed: _Placement, wanted: _Placement) -> tuple[str, ...]:
        """What was given up for memory, in words: the context, the layers on the GPU."""
        mem = placed.memory
        notes = []
        if wanted.ctx != placed.ctx:
            short = " and ".join(wanted.memory.short(wanted.memory.target_only, 0))
            notes.append(
                f"context {placed.ctx} tokens instead of {wanted.ctx}: at {wanted.ctx} the "
                f"target alone needs {short}"
            )
        budget = self.vram_budget
        if budget is None or self.servers or self.asked == 0:
            return tuple(notes)
        models = (
            [(self.target, mem.target, budget, self.target_flash)] if self.asked is None else []
        )
        if self.draft is not None and mem.draft is not None:
            models.append((self.draft, mem.draft, budget - mem.target_vram, self.local_flash))
        for info, m, room, flash in models:
            if m.gpu_layers < m.layers:
                full = model_memory(info, placed.ctx, gpu_layers=-1, flash_attn=flash).gpu
                where = (
                    f"{m.gpu_layers} of {m.name}'s {m.layers} layers on the GPU, the rest"
                    if m.gpu_layers
                    else f"all {m.layers} layers of {m.name}"
                )
                notes.append(
                    f"{where} on the CPU (all of them need {full / 1e9:.2f} GB on the GPU, "
                    f"{max(room, 0) / 1e9:.2f} GB is left there for them)"
                )
        return tuple(notes)


def choose_resources(
    hardware: Hardware,
    target: GGUFInfo,
    draft: GGUFInfo | None,
    *,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    n_gpu_layers: int | None = None,
    servers: Sequence[ServerInfo] = (),
    flash_attn_asked: bool | None = None,
    parallel: int | None = 1,
) -> Resources:
    """Context, threads and layers so that both models fit RAM and GPU memory; else `notes` say
    what was given up, the draft is left out (Fit.TARGET), or a ConfigError says which memory
    is short. `parallel`: the slots (None: as many as fit, up to DEFAULT_SLOTS)."""
    train_ctx = _check_ctx(target, n_ctx)
    local_on_gpu = hardware.gpu_offload and (bool(servers) or n_gpu_layers != 0)
    local_flash, target_flash = _flash_settings(flash_attn_asked, local_on_gpu, servers)
    placer = _Placer(
        hardware, target, draft, n_gpu_layers, tuple(servers), local_flash, target_flash
    )
    wanted = placed = placer.place(n_ctx or min(DEFAULT_CTX, train_ctx or DEFAULT_CTX))
    if n_ctx is None:
        # No size asked for: shrink the context until at least the target fits.
        while placed.memory.target_only > placed.memory.budget and placed.ctx > MIN_CTX:
            placed = placer.place(placed.ctx // 2)
    placer.check_asked(placed)
    fit = Fit(placed.memory.decision)  # raises with the numbers when not even the target fits
    slots, memory = _slots(placer, placed, parallel)
    if servers:
        _check_servers(servers, model_memory(target, placed.ctx))
    threads = n_threads or hardware.performance_cores or hardware.physical_cores
    split = tuple(rpc_split(servers)) if servers else ()
    return Resources(
        hardware=hardware,
        memory=memory,
        fit=fit,
        n_ctx=placed.ctx,
        n_threads=threads,
        n_gpu_layers=placed.target_layers,
        servers=tuple(servers),
        split=split,
        flash_attn=local_flash,
        target_flash_attn=target_flash,
        draft_gpu_layers=placed.draft_layers,
        notes=placer.notes(placed, wanted),
        slots=slots,
    )


def _slots(placer: _Placer, placed: _Placement, asked: int | None) -> tuple[int, MemoryPlan]:
    """The slots and the memory plan with their KV cache: as asked (else ConfigError), or the
    most up to DEFAULT_SLOTS that fit with the same layers; one with RPC servers."""
    if asked == 1 or placer.servers:
        return 1, placed.memory
    layers = (placed.target_layers, placed.draft_layers)
    for n in [asked] if asked else range(DEFAULT_SLOTS, 1, -1):
        trial = placer.place(placed.ctx * n)
        same = (trial.target_layers, trial.draft_layers) == layers
        try:
            fits = same and trial.memory.decision == placed.memory.decision
        except ConfigError:
            fits = False
        if fits:
            return n, trial.memory
        if asked:
            mem = trial.memory
            both = placed.memory.decision == "both"
            need = (mem.both, mem.both_vram) if both else (mem.target_only, mem.target_vram)
            short = " and ".join(mem.short(*need))
            raise ConfigError(
                f"--parallel {asked}: {asked} sequences of {placed.ctx} tokens need "
                f"{short or 'layers moved off the GPU'}; ask for fewer or a smaller --ctx-size",
                field="parallel",
            )
    return 1, placed.memory
