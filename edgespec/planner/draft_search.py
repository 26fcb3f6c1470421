"""The draft for a target given without one (`--target` alone): a file already on this machine
(models/find_draft.py), else the registry's draft for the target's family, pulled only with
the user's consent (`--yes`, or a yes at a terminal's prompt); else none, and `auto` drafts
with lookups only. What was chosen and why is one line, for the plan and the user."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import ConfigError, FetchError
from edgespec.llamacpp.architectures import loadable
from edgespec.models import files
from edgespec.models.find_draft import find_draft, registry_drafts
from edgespec.models.gguf import GGUFInfo
from edgespec.models.registry import ModelSpec, Registry
from edgespec.models.resolve import ModelRef, find_local
from edgespec.models.summary import Index
from edgespec.planner.decode_options import DecodeOptions
from edgespec.planner.load import quantize
from edgespec.planner.resources import Fit, choose_resources
from edgespec.system import settings

Confirm = Callable[[str], bool]


@dataclass(frozen=True)
class SearchResult:
    draft: Path | None
    note: str  # what was chosen and why, or why there is no draft model


def find(
    target: Path,
    registry: Registry,
    options: DecodeOptions,
    progress: files.Progress,
    confirm: Confirm | None = None,
) -> SearchResult:
    """The draft for `target` (None: none), and the line that says why."""
    index = Index()
    name = options.target or target.name
    summary = index.summary(target)
    if summary is None:  # not a GGUF file: the plan says so when it reads it
        return SearchResult(None, f"{name} could not be read to find its draft")
    choice = find_draft(target, _fits(summary.info(), options), loadable, index, name)
    if choice.chosen is not None:
        return SearchResult(choice.chosen.found.path, choice.reason)
    lookups = "; auto drafts with lookups only (--draft names a draft model)"
    # A family's registry draft is offered only where no file on this machine shares the
    # target's vocabulary: one that does but did not fit memory tells what a pull would give.
    drafts = registry_drafts(summary, registry) if not choice.compatible else []
    if not drafts:
        return SearchResult(None, choice.reason + lookups)
    spec = drafts[0]
    local = find_local(spec)
    if local is not None:  # verified in a place the search does not list
        return _checked(target, name, local.path, f"the registry's {spec.name}", index)
    ask = (
        f"{choice.reason}. Pull the registry's {spec.name} ({_gb(spec)}, {spec.license}) from "
        f"{spec.repo} as its draft?"
    )
    if options.offline or not (options.yes or (confirm is not None and confirm(ask))):
        how = "without --offline" if options.offline else "with --yes to pull it"
        hint = f"; the registry's {spec.name} ({_gb(spec)}) drafts for its family: run {how}"
        return SearchResult(None, choice.reason + hint + lookups)
    path = ModelRef(spec.name, spec=spec).locate(quantize=quantize, progress=progress)
    return _checked(target, name, path, f"the registry's {spec.name}, pulled,", index)


def _gb(spec: ModelSpec) -> str:
    return f"{spec.size / 1e9:.2f} GB" if spec.size else "size unknown"


def _checked(target: Path, name: str, draft: Path, what: str, index: Index) -> SearchResult:
    """A registry draft, used where the pair rule holds for it (its family was only guessed
    from the target's name)."""
    t, d = index.summary(target), index.summary(draft)
    reason = "unreadable" if t is None or d is None else index.verdict(t, d)
    index.save()
    if reason is not None:
        lookups = "; auto drafts with lookups only"
        return SearchResult(None, f"{what} cannot draft for {name}: {reason}{lookups}")
    return SearchResult(draft, f"draft {what} found for {name}: the draft of its family's pairs")


def _fits(target: GGUFInfo, options: DecodeOptions) -> Callable[[GGUFInfo], bool]:
    """Whether a draft fits memory beside the target, as the planner will place them on this
    machine (RPC servers, which would take the target's layers, are not asked: a draft that
    fits beside the whole target here fits beside its share)."""
    from edgespec.llamacpp.backend import hardware

    machine = hardware()

    def fits(draft: GGUFInfo) -> bool:
        try:
            resources = choose_resources(
                machine,
                target,
                draft,
                n_ctx=options.n_ctx,
                n_threads=options.n_threads,
                n_gpu_layers=options.n_gpu_layers,
                flash_attn_asked=settings.flash_attn(),
                parallel=options.parallel,
            )
        except (ConfigError, FetchError):
            return False
        return resources.fit == Fit.BOTH

    return fits
