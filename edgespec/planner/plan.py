"""From the user's options, hardware, GGUF metadata and calibration to one `DecodePlan`: which
models to load and why, the context, threads and GPU layers, the drafters allowed and the
draft-length policy. Every command builds its plan with `decide`; nothing here loads weights."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from edgespec.auto.config import AUTO, AutoConfig, PlanConfig
from edgespec.auto.costs import LearnedCosts
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.engine.drafters import DraftKind, Lookup
from edgespec.errors import ConfigError
from edgespec.llamacpp.rpc_servers import Endpoint, ServerInfo, parse_servers
from edgespec.llamacpp.rpc_servers import split as rpc_split
from edgespec.models.gguf import GGUFInfo
from edgespec.options import (
    K_MAX,
    NEEDS_DRAFT_MODEL,
    TREE_WIDTH,
    DrafterKind,
    DrafterSpec,
    draft_length,
    parse_drafter,
)
from edgespec.planner.calibrate import Calibration
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
    servers: tuple[ServerInfo, ...] = ()  # the target's layers go there (`--rpc`)
    split: tuple[float, ...] = ()  # the share of each server device
    # Flash attention for the models computed on this machine and for the target (None:
    # llama.cpp decides), as the memory plan counted them (_flash_settings).
    flash_attn: bool | None = None
    target_flash_attn: bool | None = None
    # The draft's layers on this machine's GPU (-1: all), decided apart from the target's: the
    # draft always stays on this machine, and gets the GPU memory the target leaves.
    draft_gpu_layers: int = 0
    # What the plan chose instead of the default (fewer layers, a smaller context) and why.
    notes: tuple[str, ...] = ()
    # The sequences both caches hold, n_ctx positions each (a server's slots; their KV cache
    # is counted in `memory`).
    slots: int = 1


def _flash_settings(
    asked: bool | None, local_on_gpu: bool, servers: Sequence[ServerInfo]
) -> tuple[bool | None, bool | None]:
    """Flash attention for the models computed here and for the target (None: llama.cpp's own
    choice): what was asked, else off where the models run on this CPU; a target on RPC
    servers gets llama.cpp's choice there. Without it, the rows of a verification share one
    matrix product with the KV cache; llama.cpp's CPU kernel for it goes over the whole cache
    once per row where 2 to 63 rows come in (a draft being verified). On a 2-core EPYC,
    verifying 16 and 32 tokens at 800 and 1600 tokens of context cost 7-25 % less without it,
    single tokens the same (benchmarks/HISTORY.md)."""
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
    """This machine's free GPU memory (None: no GPU takes layers, or none says how much it
    has) and whether that memory is the RAM itself (Apple, integrated GPUs). llama.cpp spreads
    the layers over every GPU, so their free memory adds up."""
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
    """Places the target's layers, then the draft's, on this machine's GPU (or the target's on
    the RPC servers): what `--gpu-layers` asks for the target, else as many as fit its memory;
    the draft, unless the GPU was refused (`--gpu-layers 0`), gets what the target leaves. The
    target first: every token passes through it, and the draft only pays where its steps are
    far cheaper than the target's, which the calibration then measures as placed."""

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
    """Context, threads and where each model's layers go, so that both models fit this
    machine's RAM and GPU memory; where they do not, what was given up is in `notes`, the
    draft is left out (Fit.TARGET), or, where not even the target fits, a ConfigError says
    which memory is short by how much. `parallel`: the sequences (slots) the caches hold,
    None: as many as fit, up to DEFAULT_SLOTS."""
    train_ctx = _check_ctx(target, n_ctx)
    # Flash attention as the models will be loaded: where the models computed here run.
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
    """How many sequences of `placed.ctx` positions the caches hold, and the memory plan with
    their KV cache counted: what was asked (a ConfigError where it does not fit as one does),
    else the most up to DEFAULT_SLOTS that fit as one does (the same models, the same layers
    on the GPU). One for a target on RPC servers: it answers one sequence."""
    if asked == 1 or placer.servers:
        return 1, placed.memory
    for n in [asked] if asked else range(DEFAULT_SLOTS, 1, -1):
        trial = placer.place(placed.ctx * n)
        same = (trial.target_layers, trial.draft_layers) == (
            placed.target_layers,
            placed.draft_layers,
        )
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


class ModelWhy(str, Enum):
    """Why `auto` drafts, or does not draft, with the draft model."""

    NO_DRAFT = "no draft model given"
    TARGET_ONLY = "only the target fits in memory"
    NOT_MEASURED = "the draft model was not measured"
    PAYS = "pays"  # some K beats plain decoding by `model_margin` at `model_alpha`
    DOES_NOT_PAY = "does not pay"


@dataclass(frozen=True, kw_only=True)
class TreeShowcase:
    """What `auto` does with a lookup whose text went several ways before (accepted at
    `alpha`): a tree of `nodes` tokens and `width` leaves (1: a chain, trees do not pay), its
    expected speed and the best chain's."""

    width: int
    nodes: int
    speed: float
    chain_speed: float
    tau_max: float  # what verifying K_MAX tokens costs, in target steps
    alpha: float


@dataclass(frozen=True, kw_only=True)
class LeavesShowcase:
    """The draft model's second choices verified beside its chain (at `model_alpha`): how many
    (0: none pay), the expected speed and the chain's alone."""

    leaves: int
    speed: float
    chain_speed: float


@dataclass(frozen=True, kw_only=True)
class DrafterChoice:
    """What `auto` may draft with, why, and the numbers behind it; `reason` renders them."""

    use_model: bool
    model_k: int
    model_speed: float
    ngram_k: int
    ngram_speed: float
    why: ModelWhy
    measured: bool  # False: the costs are guessed from the files' sizes
    tree: TreeShowcase
    c: float | None = None  # a draft step, in target steps (when the model was weighed)
    tau2: float | None = None  # verifying 2 tokens against one (when the model was weighed)
    leaves: LeavesShowcase | None = None  # when the model is used
    model_alpha: float = AUTO.plan.model_alpha  # the acceptance the model was weighed at
    lookup_alpha: float = AUTO.plan.lookup_showcase_alpha  # and lookups

    @property
    def model_reason(self) -> str:
        """Whether the draft model is used, and why, in words (the plan's draft_reason)."""
        if self.why not in (ModelWhy.PAYS, ModelWhy.DOES_NOT_PAY):
            return self.why.value
        costs = (
            f"a draft step costs c={self.c:.2f} target steps and verifying 2 tokens "
            f"{self.tau2:.2f}x one: "
        )
        if self.why is ModelWhy.DOES_NOT_PAY:
            return costs + (
                f"even at a={self.model_alpha} the draft model cannot beat plain decoding (best "
                f"{self.model_speed:.2f}x), so it is not loaded"
            )
        return costs + (
            f"at a={self.model_alpha} the draft model reaches {self.model_speed:.2f}x with "
            f"K={self.model_k}, so it is used, K re-chosen every round"
        )

    @property
    def ngram_reason(self) -> str:
        note = (
            f"n-gram lookup (free drafts) speculates when the text repeats what came before: at "
            f"a={self.lookup_alpha} the best K is {self.ngram_k} (expected "
            f"{self.ngram_speed:.2f}x); " + _tree_note(self.tree)
        )
        if not self.measured:
            note += "; these costs are guessed from the files' sizes until this device is measured"
        return note

    @property
    def reason(self) -> str:
        """The whole sentence: the draft model, its second choices where it is used, n-gram
        lookup."""
        leaves = [_leaves_note(self.leaves)] if self.leaves is not None else []
        return "; ".join([self.model_reason, *leaves, self.ngram_reason])


def cost_model(calibration: Calibration, config: PlanConfig = AUTO.plan) -> CostModel:
    return CostModel(
        calibration.tau,
        calibration.c if calibration.c is not None else 0.0,
        config.round_overhead_s / calibration.target_step_s,
    )


def _tree_showcase(costs: CostModel, config: AutoConfig) -> TreeShowcase:
    """What `auto` would do with a typical lookup where the text went several ways before: a
    long match whose main chain is accepted less often (`tree_showcase_alpha`), with other
    continuations seen at its first three positions. Its shape, its expected speed, and the
    best chain's."""
    alpha = config.plan.tree_showcase_alpha
    policy = AdaptiveDraftLength(costs, tree_width=TREE_WIDTH, config=config)
    offer = Lookup(tuple(range(K_MAX)), config.policy.long_match, "suffix", forks=(0, 1, 2))
    speed, tree = policy.preview_lookup(offer, alpha)
    chain = policy.preview_lookup(replace(offer, forks=()), alpha)[0]
    return TreeShowcase(
        width=tree.width,
        nodes=tree.nodes,
        speed=speed,
        chain_speed=chain,
        tau_max=costs.tau(K_MAX),
        alpha=alpha,
    )


def _leaves_showcase(costs: CostModel, alpha: float, config: AutoConfig) -> LeavesShowcase:
    """What `auto` would do with the draft model accepted at `alpha`: how many of its second
    choices it verifies as leaves beside its chain (0: none pay), the expected speed, and the
    chain's alone."""

    def best(leaves_allowed: int) -> tuple[float, int]:
        policy = AdaptiveDraftLength(costs, tree_width=leaves_allowed, config=config)
        speed, shape = policy.preview_model(K_MAX, alpha)
        return speed, shape.width - 1

    speed, leaves = best(TREE_WIDTH)
    return LeavesShowcase(leaves=leaves, speed=speed, chain_speed=best(1)[0])


def _tree_note(tree: TreeShowcase) -> str:
    """Whether tree drafts pay on this device, in words: where verifying more tokens costs
    little they do, where it is steep `auto` keeps to chains."""
    if tree.width == 1:
        return (
            "tree drafts (other continuations verified in the same pass) do not pay here: "
            f"verifying more tokens costs too much (tau({K_MAX}) = {tree.tau_max:.1f})"
            ", so auto keeps to chains"
        )
    return (
        f"tree drafts pay here: where the text went several ways before (a={tree.alpha}"
        f"), a tree of {tree.nodes} tokens ({tree.width} leaves) is expected at {tree.speed:.2f}x "
        f"against {tree.chain_speed:.2f}x for the best chain"
    )


def _leaves_note(leaves: LeavesShowcase) -> str:
    """Whether the draft model's second choices, verified beside its chain, pay here."""
    if leaves.leaves == 0:
        return "its second choices (tree leaves beside the chain) do not pay here"
    return (
        f"its second choices are verified beside the chain where it is unsure ({leaves.leaves} "
        f"leaves, expected {100 * (leaves.speed / leaves.chain_speed - 1):.1f} % faster than "
        "the chain alone)"
    )


def choose_drafters(
    calibration: Calibration, fit: Fit, draft_given: bool = True, config: AutoConfig = AUTO
) -> DrafterChoice:
    """Whether to load the draft model: only if at `model_alpha` some K beats plain decoding
    by `model_margin` (below it, it costs memory and load time for nothing)."""
    costs = cost_model(calibration, config.plan)
    # The same costs the policy weighs every round, in target steps (a step of 1 s).
    steps = LearnedCosts(costs, 1.0, calibration.draft_tau or None, config.costs)
    plan = config.plan
    ngram_k, ngram_speed = steps.best_k(DraftKind.LOOKUP, plan.lookup_showcase_alpha, K_MAX)
    tree = _tree_showcase(costs, config)
    base = DrafterChoice(
        use_model=False,
        model_k=0,
        model_speed=0.0,
        ngram_k=ngram_k,
        ngram_speed=ngram_speed,
        why=ModelWhy.NO_DRAFT,
        measured=calibration.measured,
        tree=tree,
        model_alpha=plan.model_alpha,
        lookup_alpha=plan.lookup_showcase_alpha,
    )
    if not draft_given:
        return base
    if fit != Fit.BOTH:
        return replace(base, why=ModelWhy.TARGET_ONLY)
    if calibration.c is None:
        return replace(base, why=ModelWhy.NOT_MEASURED)
    model_k, model_speed = steps.best_k(DraftKind.MODEL, plan.model_alpha, K_MAX)
    weighed = replace(
        base, model_k=model_k, model_speed=model_speed, c=calibration.c, tau2=costs.tau(2)
    )
    if model_speed < plan.model_margin:
        return replace(weighed, why=ModelWhy.DOES_NOT_PAY)
    leaves = _leaves_showcase(costs, plan.model_alpha, config)
    return replace(weighed, use_model=True, why=ModelWhy.PAYS, leaves=leaves)


def _mem(m: ModelMemory | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "file": m.name,
        "weights": m.weights,
        "kv_cache": m.kv_cache,
        "compute": m.compute,
        "total": m.total,
        "gpu": {
            "layers": m.gpu_layers,
            "of": m.layers,
            "weights": m.gpu_weights,
            "kv_cache": m.gpu_kv_cache,
            "compute": m.gpu_compute,
            "total": m.gpu,
        },
    }


def check_rpc(servers: str | None, n_gpu_layers: int | None) -> tuple[Endpoint, ...]:
    """The RPC servers of `--rpc` (none when not given); ConfigError before anything loads."""
    if servers is None:
        return ()
    if sys.platform == "win32":
        # The target's child process reads its logits from a file mapping it inherits by
        # descriptor (llamacpp/rpc_target.py), which Windows' process creation does not hand on.
        raise ConfigError(
            "--rpc does not run on Windows yet; use it from macOS or Linux", field="rpc"
        )
    endpoints = parse_servers(servers)
    if n_gpu_layers == 0:
        raise ConfigError(
            "--rpc puts the target's layers on the RPC servers and --gpu-layers 0 keeps them all "
            "here: drop one of the two",
            field="rpc",
        )
    return endpoints


def check_memory(folder: str | None) -> None:
    """`--memory` names a folder (made when missing), never a file."""
    if folder is not None and Path(folder).expanduser().is_file():
        raise ConfigError(f"--memory {folder} is a file; give a folder", field="memory")


@dataclass(frozen=True, kw_only=True)
class DecodeOptions:
    """What the user asked for; None leaves the choice to the planner."""

    pair: str | None = None
    target: str | None = None  # registry name or .gguf path (overrides the pair's)
    draft: str | None = None
    drafter: str | DrafterSpec = DrafterKind.AUTO  # a name, with auto's switches (`auto:model=0`)
    k: int | None = None  # fixed K, or with `auto` the most it may choose; None: the default
    n_ctx: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    keep_draft: bool = False  # load the draft model even where the drafter does not need it
    offline: bool = False
    recalibrate: bool = False
    # Where this device has no cached calibration, start `auto` from costs guessed from the
    # files and measure after the answer (Speculator.calibrate_pending), not before it.
    calibrate_later: bool = False
    rpc: str | None = None  # HOST:PORT[,HOST:PORT...]: llama.cpp RPC servers for the target
    memory: str | None = None  # a folder of past generations for auto's suffix drafts
    # The sequences the caches hold (a server's slots): None, as many as fit (up to 4).
    parallel: int | None = 1
    yes: bool = False  # pull the registry's draft found for a --target alone without asking

    # `--rpc` and the drafter parsed (set where the options are built)
    servers: tuple[Endpoint, ...] = field(init=False, repr=False, compare=False)
    drafter_spec: DrafterSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """The options are checked here, where they are built, and nowhere else: the RPC
        servers, the memory folder, the drafter and K (defaulted here), before anything is
        fetched or loaded."""
        object.__setattr__(self, "servers", check_rpc(self.rpc, self.n_gpu_layers))
        check_memory(self.memory)
        object.__setattr__(self, "drafter_spec", parse_drafter(self.drafter))
        object.__setattr__(self, "k", draft_length(self.drafter_spec, self.k))
        if self.parallel is not None and self.parallel < 1:
            raise ConfigError(f"--parallel must be >= 1, got {self.parallel}", field="parallel")

    @property
    def drafter_name(self) -> DrafterKind:
        """The drafter without its switches: `auto` for `auto:hints=0`."""
        return self.drafter_spec.name

    @property
    def needs_draft_model(self) -> bool:
        return self.drafter_name in NEEDS_DRAFT_MODEL

    @property
    def wants_draft(self) -> bool:
        """Whether the draft file is worth finding: a drafter may use it."""
        auto = self.drafter_name is DrafterKind.AUTO
        return self.needs_draft_model or auto or self.keep_draft


@dataclass(frozen=True, kw_only=True)
class LinkCost:
    """What a target step costs through the RPC servers, against this machine alone."""

    target_step_s: float  # measured through the servers (calibration)
    local_step_s: float | None  # this machine's own calibration, when there is one
    rtt_s: float  # the slowest server's round trip for a small command

    def describe(self) -> str:
        step = f"a target step through the RPC servers costs {self.target_step_s * 1000:.1f} ms"
        rtt = f"a network round trip {self.rtt_s * 1000:.2f} ms"
        if self.local_step_s is None:
            return f"{step} ({rtt}; no local calibration of the target to compare with)"
        extra = (self.target_step_s - self.local_step_s) * 1000
        return (
            f"{step}, {extra:+.1f} ms against {self.local_step_s * 1000:.1f} ms on this machine "
            f"alone ({rtt}): every round saved by speculation saves that"
        )


@dataclass(frozen=True, kw_only=True)
class DecodePlan:
    """Everything decided before weights load: what `edgespec plan --json` prints."""

    target: Path
    draft: Path | None  # the draft model to load; None: none is loaded
    draft_reason: str  # why it is, or is not, loaded
    resources: Resources
    drafter: DrafterSpec  # the drafter used unless a call asks for another
    k: int  # its K: fixed, or for `auto` the most it may choose in a round
    drafters: tuple[DrafterKind, ...]  # the drafters that can run with what is loaded
    calibration: Calibration | None = None  # measured (or cached) for `auto`
    calibration_cached: bool = False
    choice: DrafterChoice | None = None  # what `auto` may use, and why
    link: LinkCost | None = None  # with RPC servers, once calibrated
    memory: Path | None = None  # `--memory`: past generations for auto's suffix drafts

    def to_json(self) -> dict[str, Any]:
        doc = plan_document(self.resources, self.calibration, self.calibration_cached, self.choice)
        doc["rpc"] = _rpc_document(self.resources, self.link) if self.resources.servers else None
        doc["models"] = {
            "target": str(self.target),
            "draft": str(self.draft) if self.draft else None,
        }
        doc["draft_model"] = {"loaded": self.draft is not None, "reason": self.draft_reason}
        doc["drafter"] = {"name": self.drafter.label, "k": self.k, "allowed": list(self.drafters)}
        return doc


def _draft_decision(
    options: DecodeOptions, draft: Path | None, resources: Resources, choice: DrafterChoice | None
) -> tuple[bool, str]:
    """Whether to load the draft model, and why."""
    if draft is None:
        if options.wants_draft:
            return False, "no draft model given"
        return False, f"drafter {options.drafter_spec.label} does not use it"
    if resources.fit != Fit.BOTH:
        why = (
            "the draft model does not fit next to the target: both need "
            + resources.memory.draft_shortage
        )
        if options.needs_draft_model:
            raise ConfigError(f"{why}; use --drafter ngram")
        return False, why
    if options.needs_draft_model:
        return True, f"drafter {options.drafter_spec.label} drafts with it"
    if options.keep_draft:
        return True, "kept loaded on request"
    if choice is not None:
        return choice.use_model, choice.model_reason
    return False, f"drafter {options.drafter_spec.label} does not use it"


def decide(
    options: DecodeOptions,
    target: Path,
    draft: Path | None,
    resources: Resources,
    calibration: Calibration | None = None,
    cached: bool = False,
    link: LinkCost | None = None,
) -> DecodePlan:
    """The one place where what to load and how to speculate is decided."""
    choice = None
    if options.drafter_name is DrafterKind.AUTO:
        if calibration is None:
            raise ConfigError("the auto drafter needs this device's calibration")
        choice = choose_drafters(calibration, resources.fit, draft_given=draft is not None)
    load, reason = _draft_decision(options, draft, resources, choice)
    allowed = [DrafterKind.NGRAM, DrafterKind.NONE]
    if load:
        allowed[:0] = [DrafterKind.MODEL, DrafterKind.HYBRID]
    if calibration is not None:
        allowed.insert(0, DrafterKind.AUTO)
    assert options.k is not None
    return DecodePlan(
        target=target,
        draft=draft if load else None,
        draft_reason=reason,
        resources=resources,
        drafter=options.drafter_spec,
        k=options.k,
        drafters=tuple(allowed),
        calibration=calibration,
        calibration_cached=cached,
        choice=choice,
        link=link,
        memory=Path(options.memory).expanduser() if options.memory else None,
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _rpc_document(resources: Resources, link: LinkCost | None) -> dict[str, Any]:
    shares = iter(resources.split)
    servers = [
        {
            "server": str(s.endpoint),
            "protocol": ".".join(map(str, s.version)),
            "devices": [
                {"free": free, "total": total, "share": round(next(shares), 4)}
                for free, total in s.memory
            ],
            "rtt_ms": round(s.rtt_s * 1000, 3),
        }
        for s in resources.servers
    ]
    doc: dict[str, Any] = {"servers": servers, "link": None}
    if link is not None:
        doc["link"] = {
            "target_step_ms": _ms(link.target_step_s),
            "local_target_step_ms": _ms(link.local_step_s),
            "note": link.describe(),
        }
    return doc


def _gpu_document(mem: MemoryPlan) -> dict[str, Any] | None:
    """This machine's GPU memory against what the plan puts there (None: none reported)."""
    if mem.vram is None:
        return None
    return {
        "free": mem.vram,
        "budget": mem.vram_budget,
        "target": mem.target_vram,
        "both": mem.both_vram if mem.draft else None,
        # The GPU computes from the RAM: what it holds is in the RAM's numbers too.
        "unified": mem.unified,
    }


def plan_document(
    resources: Resources,
    calibration: Calibration | None,
    cached: bool,
    choice: DrafterChoice | None,
) -> dict[str, Any]:
    """The plan's measured and decided parts as JSON-ready data."""
    mem = resources.memory
    doc: dict[str, Any] = {
        "hardware": resources.hardware.as_dict(),
        "memory": {
            "target": _mem(mem.target),
            "draft": _mem(mem.draft),
            "runtime": mem.runtime,
            "target_only": mem.target_only,
            "both": mem.both if mem.draft else None,
            "available": mem.available,
            "budget": mem.budget,
            "fit": resources.fit.value,
            "gpu": _gpu_document(mem),
            "notes": list(resources.notes),
        },
        "settings": {
            "n_ctx": resources.n_ctx,
            "n_threads": resources.n_threads,
            "n_gpu_layers": resources.n_gpu_layers,
            "draft_gpu_layers": resources.draft_gpu_layers,
            "flash_attn": resources.flash_attn,
            "slots": resources.slots,
        },
        "calibration": None,
        "decision": None,
    }
    if calibration is not None:
        doc["calibration"] = {
            "target_step_ms": _ms(calibration.target_step_s),
            "draft_step_ms": _ms(calibration.draft_step_s),
            "c": None if calibration.c is None else round(calibration.c, 4),
            "tau": {str(n): round(v, 4) for n, v in sorted(calibration.tau.items())},
            "seconds": round(calibration.seconds, 3),
            "cached": cached,
            "passes": calibration.passes,
            "noise": None if calibration.noise is None else round(calibration.noise, 4),
            "dips": calibration.dips(),
            "draft_tau": {str(n): round(v, 4) for n, v in sorted(calibration.draft_tau.items())},
        }
    if choice is not None:
        doc["decision"] = {
            "drafter": DrafterKind.AUTO,
            "drafters": [DrafterKind.NGRAM, *([DrafterKind.MODEL] if choice.use_model else [])],
            "model_k": choice.model_k,
            "model_expected_speedup": round(choice.model_speed, 3),
            "ngram_k_at_high_acceptance": choice.ngram_k,
            "ngram_expected_speedup": round(choice.ngram_speed, 3),
            "reason": choice.reason,
        }
    return doc
