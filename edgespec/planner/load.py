"""Loading what a plan says: the build's smoke test, then the target (on RPC servers: in a
child process) and the draft. llama.cpp is imported when a model loads, never at import."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgespec.buildcheck import smoke
from edgespec.options import TREE_WIDTH
from edgespec.planner.resources import Resources
from edgespec.system import settings

if TYPE_CHECKING:
    from edgespec.llamacpp.model import LlamaModel, LoadOptions

Note = Callable[[str], None]


def load_models(
    target: Path, draft: Path | None, resources: Resources, note: Note | None
) -> list[Any]:
    """The target (and draft) loaded with the planned settings, once this llama.cpp build has
    passed its smoke test (the smallest of the files is the one tested)."""
    from edgespec.llamacpp.model import LlamaModel

    loading = [target, *([draft] if draft is not None else [])]
    tested = min(loading, key=lambda p: p.stat().st_size)
    smoke.ensure_works(tested, note, gpu_layers=_local_gpu_layers(resources))
    options = load_options(resources)
    # The target verifies tree drafts, the draft reads one sequence (per slot); each has its
    # own GPU layers.
    target_options = replace(options, tree_width=TREE_WIDTH, n_gpu_layers=resources.n_gpu_layers)
    if not resources.servers:
        return [LlamaModel(target, target_options), *(LlamaModel(p, options) for p in loading[1:])]
    models: list[Any] = [_remote_target(target, options, resources, note)]
    try:
        return models + [LlamaModel(path, options) for path in loading[1:]]
    except BaseException:
        models[0].close()
        raise


def _local_gpu_layers(resources: Resources) -> int:
    """The smoke test's GPU layers: the most offloaded local model's (-1: all), so that GPU
    kernels that crash fail the test even where the file tested stays on the CPU."""
    if not resources.hardware.gpu_offload:
        return 0
    local = [resources.draft_gpu_layers, *([] if resources.servers else [resources.n_gpu_layers])]
    return -1 if any(n < 0 for n in local) else max(local)


def _remote_target(
    target: Path, options: LoadOptions, resources: Resources, note: Note | None
) -> Any:
    """The target on the RPC servers, in a child process; the draft stays here."""
    from edgespec.llamacpp.rpc_target import RemoteTarget

    servers = [s.endpoint for s in resources.servers]
    remote = replace(
        options,
        n_gpu_layers=resources.n_gpu_layers,
        rpc=tuple(map(str, servers)),
        tensor_split=resources.split,
        flash_attn=resources.target_flash_attn,
    )
    if note is not None:
        note(
            "the target on the RPC servers verifies chains only: tree drafts are off "
            "(the child process answers one sequence)"
        )
    return RemoteTarget(target, remote, servers, note)


def load_options(resources: Resources) -> LoadOptions:
    """How the draft is loaded here (the target: with its own GPU layers and tree width)."""
    from edgespec.llamacpp.model import LoadOptions

    return LoadOptions(
        n_ctx=resources.n_ctx,
        n_threads=resources.n_threads,
        n_gpu_layers=resources.draft_gpu_layers,
        huge_pages=settings.huge_pages(),
        flash_attn=resources.flash_attn,
        sequences=resources.slots,
    )


def load_model(path: str | Path, resources: Resources) -> LlamaModel:
    """One model with this machine's settings (a draft loaded for a measurement only)."""
    from edgespec.llamacpp.model import LlamaModel

    return LlamaModel(path, load_options(resources))


def quantize(source: Path, out: Path, kind: str, pure: bool) -> None:
    """llama.cpp's quantizer, handed down to `models.derive` (which sits below the adapter)."""
    from edgespec.llamacpp.backend import quantize as llama_quantize

    llama_quantize(source, out, kind, pure)
