"""The planner's I/O half, `make_plan`: files, metadata, the machine and its RPC servers, this
device's calibration (cached or measured), then `decide` (decide.py, which does no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgespec.errors import ConfigError
from edgespec.llamacpp import rpc_servers as rpc
from edgespec.llamacpp.architectures import check_loadable
from edgespec.llamacpp.rpc_servers import Endpoint
from edgespec.models import files
from edgespec.models.compat import check_compatible
from edgespec.models.gguf import GGUFInfo, read_gguf
from edgespec.models.registry import Registry, load_registry
from edgespec.models.resolve import pair_refs
from edgespec.options import K_MAX, Drafting
from edgespec.planner import calibrate as calibration_store
from edgespec.planner import draft_search
from edgespec.planner.calibrate import Calibration, calibrate
from edgespec.planner.decide import decide
from edgespec.planner.decode_options import DecodeOptions
from edgespec.planner.load import load_models, quantize
from edgespec.planner.plan import DecodePlan, LinkCost
from edgespec.planner.resources import Fit, Resources, choose_resources
from edgespec.system import paths, settings
from edgespec.system.device import cpu_model, gpu_identity
from edgespec.version import __version__

CALIBRATION_TEXT = (
    "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n"
    "    middle = len(items) // 2\n    left = merge_sort(items[:middle])\n"
    "    right = merge_sort(items[middle:])\n    return merge(left, right)\n\n"
) * 8


def make_plan(
    options: DecodeOptions | None = None,
    drafting: Drafting | None = None,
    *,
    progress: files.Progress | None = None,
    registry: Registry | None = None,
    confirm: draft_search.Confirm | None = None,
) -> DecodePlan:
    """Find (or pull) the models, check the pair and the memory from metadata, calibrate for
    `auto` (once per device), and decide: the plan every command loads from. `drafting`: how
    to draft (default: `auto`). A target given alone gets the draft the search finds
    (draft_search.py); `confirm` asks the user before a registry draft is pulled for it."""
    options = options or DecodeOptions()
    drafting = drafting or options.drafting or Drafting.of()
    progress = progress or files.Silent()
    registry = registry or load_registry()
    t_ref, d_ref = pair_refs(registry, options.pair, options.target, options.draft)
    search = d_ref is None and options.draft is None and drafting.wants_model
    if drafting.needs_model and d_ref is None and not search:
        raise ConfigError(
            f"drafter '{drafting.drafter.label}' needs a draft model; give --draft or a --pair",
            field="draft",
        )
    target = t_ref.locate(quantize=quantize, offline=options.offline, progress=progress)
    draft, found = None, None
    if search:
        found = draft_search.find(target, registry, options, progress, confirm)
        draft = found.draft
        progress.note(found.note)
        if drafting.needs_model and draft is None:
            raise ConfigError(
                f"drafter '{drafting.drafter.label}' needs a draft model: {found.note}",
                field="draft",
            )
    if d_ref is not None and drafting.wants_model:
        draft = d_ref.locate(quantize=quantize, offline=options.offline, progress=progress)
    flash_attn = settings.flash_attn()
    t_info = read_gguf(target)
    d_info = read_gguf(draft) if draft is not None else None
    for info in (t_info, d_info):
        if info is not None:
            check_loadable(info.path, info.architecture)
    if d_info is not None:
        check_compatible(t_info, d_info)
    resources = _resources(t_info, d_info, options, flash_attn, options.servers)
    cal, cached = None, False
    if drafting.auto:
        cal, cached = _calibration(target, draft, resources, options, progress)
    link = None
    if resources.servers and cal is not None:
        here = _resources(t_info, d_info, options, flash_attn, ())
        link = _link_cost(target, draft, here, resources, cal)
    memory = Path(options.memory).expanduser() if options.memory else None
    plan = decide(drafting, target, draft, resources, cal, cached, link, memory)
    if found is None:
        return plan
    said = found.note if draft is None else f"{found.note}; {plan.draft_reason}"
    return replace(plan, draft_reason=said)


def calibration_for(target: Path, draft: Path | None) -> Calibration | None:
    """The cached calibration `auto` would use for these files with the default settings."""
    flash_attn = settings.flash_attn()
    t_info = read_gguf(target)
    d_info = read_gguf(draft) if draft is not None else None
    if d_info is not None:
        check_compatible(t_info, d_info)
    resources = _resources(t_info, d_info, DecodeOptions(), flash_attn, ())
    return _cached_calibration(target, draft, resources)[1]


def measure_loaded(target: Any, draft: Any | None, key: str, resources: Resources) -> Calibration:
    """Calibrate with models already loaded, and cache the result under `key`."""
    context = target.tokenize(CALIBRATION_TEXT, add_special=False)
    gpu = _on_gpu(resources)
    cal = calibrate(target, draft, context, max_n=K_MAX, gpu=gpu)
    cal = replace(cal, key={"key": key})
    calibration_store.save(paths.calibration_dir(), key, cal)
    return cal


def _on_gpu(resources: Resources) -> bool:
    """Whether a model computes on a GPU (or RPC servers, whose devices are unknown here), which
    calibration times in three passes at least. A GPU build that offloads no layer does not."""
    offload = resources.hardware.gpu_offload or bool(resources.servers)
    return (offload and resources.n_gpu_layers != 0) or (
        resources.hardware.gpu_offload and resources.draft_gpu_layers != 0
    )


def _calibration_key(target: Path, draft: Path | None, resources: Resources) -> str:
    """Calibrations hold for files of this shape on this machine, build and settings."""
    from edgespec.llamacpp.backend import library_version

    return calibration_store.cache_key(
        machine=f"{cpu_model()} x{resources.hardware.logical_cores}",
        # Only with GPUs: a CPU's key stays; two cards behind one CPU get two calibrations.
        **({"gpus": gpu_identity(resources.hardware.gpus)} if resources.hardware.gpus else {}),
        target=files.identity(target),
        draft=files.identity(draft) if draft is not None else None,
        backend=resources.hardware.backend,
        threads=resources.n_threads,
        gpu_layers=resources.n_gpu_layers,
        # Only where the draft's placement differs from the target's: other keys stay.
        **(
            {"draft_gpu_layers": resources.draft_gpu_layers}
            if resources.draft_gpu_layers != resources.n_gpu_layers
            else {}
        ),
        edgespec=__version__,
        llama_cpp=library_version(),
        calibration=3,  # the method's version: 3 warms every batch shape before timing it
        flash_attn=resources.target_flash_attn,
        # Only with servers: a local calibration keeps its key.
        **({"rpc": [str(s.endpoint) for s in resources.servers]} if resources.servers else {}),
    )


def _resources(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    options: DecodeOptions,
    flash_attn: bool | None,
    servers: Sequence[Endpoint],
) -> Resources:
    """What fits on this machine (and `servers`) and with which settings: no weights are read."""
    from edgespec.llamacpp.backend import hardware

    return choose_resources(
        hardware(),
        target,
        draft,
        n_ctx=options.n_ctx,
        n_threads=options.n_threads,
        n_gpu_layers=options.n_gpu_layers,
        servers=rpc.probe_all(servers),
        flash_attn_asked=flash_attn,
        parallel=options.parallel,
    )


def _measure(
    target: Path, draft: Path | None, resources: Resources, key: str, progress: files.Progress
) -> Calibration:
    """Calibrate this device: the models are loaded for the measurement only, then closed."""
    progress.note("measuring this device for the auto drafter (once; cached afterwards)")
    models = load_models(target, draft, resources, progress.note)
    try:
        return measure_loaded(models[0], models[1] if draft else None, key, resources)
    finally:
        for model in models:
            model.close()


def _cached_calibration(
    target: Path, draft: Path | None, resources: Resources
) -> tuple[str, Calibration | None]:
    """The calibration's key (the draft counts only when it fits), and what is cached under it."""
    key = _calibration_key(target, draft if resources.fit == Fit.BOTH else None, resources)
    return key, calibration_store.load_cached(paths.calibration_dir(), key)


def _calibration(
    target: Path,
    draft: Path | None,
    resources: Resources,
    options: DecodeOptions,
    progress: files.Progress,
) -> tuple[Calibration, bool]:
    """This device's costs for `auto`: cached, else measured, or with `calibrate_later` guessed
    for now (never with RPC servers: their link's cost is what their plan is about)."""
    key, cached = _cached_calibration(target, draft, resources)
    if cached is not None and not options.recalibrate:
        return cached, True
    measured_draft = draft if resources.fit == Fit.BOTH else None
    if options.calibrate_later and not options.recalibrate and not resources.servers:
        size = measured_draft.stat().st_size if measured_draft is not None else None
        guess = calibration_store.prior(target.stat().st_size, size)
        where = {"key": key, "draft": str(measured_draft) if measured_draft else None}
        return replace(guess, key=where), False
    return _measure(target, measured_draft, resources, key, progress), False


def _link_cost(
    target: Path,
    draft: Path | None,
    here: Resources,
    resources: Resources,
    calibration: Calibration,
) -> LinkCost:
    """The target step measured through the RPC servers, against this machine's (`here`)."""
    local = _cached_calibration(target, draft, here)[1]
    return LinkCost(
        target_step_s=calibration.target_step_s,
        local_step_s=None if local is None else local.target_step_s,
        rtt_s=max(s.rtt_s for s in resources.servers),
    )
