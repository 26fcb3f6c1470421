"""Loading what a plan says: the llama.cpp build's smoke test first, then the target (on RPC
servers: in a child process, see edgespec.llamacpp.rpc_target) and the draft with the planned
settings.

llama.cpp is imported here when a model loads, never at import."""

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
    # The target verifies tree drafts; the draft model reads one sequence (a server's slots: one
    # each, in both). Each has its own share of the GPU (the plan's n_gpu_layers and
    # draft_gpu_layers).
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
    """The layers the smoke test puts on this machine's GPU: as many as the most offloaded model
    computed here (-1: all), so that a build whose GPU kernels crash fails the test even when
    the file tested (the smallest) is planned to stay on the CPU. A target on RPC servers leaves
    this machine's GPU alone; a build without offload has no GPU."""
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
    """How the draft is loaded on this machine (the target: these, with its own GPU layers and
    tree verification)."""
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

    options = load_options(resources)
    return LlamaModel(path, options)


def quantize(source: Path, out: Path, kind: str, pure: bool) -> None:
    """llama.cpp's quantizer (`edgespec.models.derive` makes files with it, handed down from
    here: the models package sits below the adapter)."""
    from edgespec.llamacpp.backend import quantize as llama_quantize

    llama_quantize(source, out, kind, pure)
