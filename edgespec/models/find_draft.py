"""A draft for a target no pair names, chosen among the GGUF files already on this machine:
those that pass the pair rule with it (compat.py), that are smaller than it, and that fit
memory beside it; the smallest model first, in the quantization preferred for a draft."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgespec.models.gguf import GGUFInfo
from edgespec.models.registry import ModelSpec, Registry
from edgespec.models.stores import Found, found_models
from edgespec.models.summary import Index, Summary

# A draft's quantization, best first: 4-bit reads the fewest bytes a step without the
# acceptance that 2- and 3-bit files give up (a guess); Q4_0 first, the cheapest step on a CPU
# (docs/tuning.md, The derived draft). Others come last.
PREFERRED_QUANTS = [
    "Q4_0", "Q4_K_M", "Q4_K_S", "Q4_1", "IQ4_NL", "IQ4_XS", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1",
    "Q6_K", "Q8_0", "F16", "BF16", "F32",
]  # fmt: skip
# What a file must be to be offered as a draft: a model (not a projector or an adapter).
_MODEL_TYPES = ("", "model")


@dataclass(frozen=True)
class Candidate:
    found: Found
    summary: Summary

    def describe(self) -> str:
        s = self.summary
        what = " ".join(x for x in (s.basename, s.size_label, s.quantization) if x)
        where = {"hf-cache": "the Hugging Face cache", "edgespec": "edgespec's store"}
        store = where.get(self.found.store, self.found.store)
        return f"{self.found.spec} ({what}, {s.file_bytes / 1e9:.2f} GB, {store})"


@dataclass(frozen=True)
class DraftChoice:
    """The draft chosen (None: none), and what the search saw, for the plan to say."""

    chosen: Candidate | None
    looked_at: int  # files smaller than the target that were read
    compatible: int  # of those, the ones that pass the pair rule
    reason: str


def quant_rank(name: str) -> int:
    return PREFERRED_QUANTS.index(name) if name in PREFERRED_QUANTS else len(PREFERRED_QUANTS)


def find_draft(
    target: Path,
    fits: Callable[[GGUFInfo], bool],
    loadable: Callable[[str], bool],
    index: Index | None = None,
    name: str | None = None,
) -> DraftChoice:
    """The draft for `target` (called `name` where it is said) among the files `found_models`
    lists and those beside it: `fits` says whether a draft fits memory beside the target,
    `loadable` whether this llama.cpp knows an architecture."""
    index = index or Index()
    name = name or target.name
    try:
        t = index.summary(target)
        if t is None:
            return DraftChoice(None, 0, 0, f"{name} could not be read to find its draft")
        # A draft as large as the target costs a target step per token: it never pays.
        whole = t.weights_bytes + t.header_bytes  # every part of a split target
        smaller = [
            f
            for f in found_models(beside=target)
            if f.path.resolve() != target.resolve() and _size(f.path) < whole
        ]
        read = [(f, index.summary(f.path)) for f in smaller]
        offered = [
            Candidate(f, s)
            for f, s in read
            if s is not None
            and str(s.metadata.get("general.type", "")) in _MODEL_TYPES
            and not s.metadata.get("split.no")
            and loadable(s.architecture)
        ]
        compatible = [c for c in offered if index.verdict(t, c.summary) is None]
    finally:
        index.save()
    ranked = sorted(compatible, key=_rank)
    chosen = next((c for c in ranked if fits(c.summary.info())), None)
    return DraftChoice(chosen, len(read), len(compatible), _reason(chosen, len(read), ranked, name))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _rank(c: Candidate) -> tuple[float, int, int, str]:
    s = c.summary
    return (s.parameters, quant_rank(s.quantization), s.file_bytes, c.found.spec)


def _reason(chosen: Candidate | None, read: int, ranked: list[Candidate], name: str) -> str:
    files = f"{read} smaller GGUF file{'s' * (read != 1)} on this machine"
    if chosen is None:
        why = (
            f"{len(ranked)} share{'s' * (len(ranked) == 1)} its vocabulary but none fits memory "
            "beside it"
            if ranked
            else "none shares its vocabulary (the pair rule)"
        )
        return f"no draft model for {name}: of {files}, {why}"
    which = (
        f"the smallest of the {len(ranked)} of {files} that share its vocabulary"
        if len(ranked) > 1
        else f"the one of {files} that shares its vocabulary"
    )
    same_size = [c for c in ranked if c.summary.parameters == chosen.summary.parameters]
    quants = sorted({c.summary.quantization for c in same_size} - {chosen.summary.quantization})
    preferred = f"; {chosen.summary.quantization} preferred to {', '.join(quants)}" * bool(quants)
    skipped = ranked.index(chosen)
    passed = f" ({skipped} smaller did not fit)" * bool(skipped)
    return (
        f"draft {chosen.describe()} found for {name}: {which} (the pair rule) and fits memory "
        f"beside it{passed}{preferred}"
    )


def registry_drafts(target: Summary, registry: Registry) -> list[ModelSpec]:
    """The registry's drafts for the target's family, best first: those of the pairs whose
    models' names hold its general.basename (Qwen2.5-Coder, Meta-Llama-3.1, gemma-3...),
    smaller than it."""
    family = target.basename.lower().replace(" ", "-")
    if not family:
        return []
    drafts: dict[str, ModelSpec] = {}
    for pair in registry.pairs.values():
        names = (f"{m.repo}/{m.filename}".lower() for m in (pair.target, pair.draft))
        small = pair.draft.size is None or pair.draft.size < target.file_bytes
        if small and any(family in name for name in names):
            drafts.setdefault(pair.draft.name, pair.draft)
    # Fetched before made here (a derived draft is its pair's choice for a heavier target).
    return sorted(drafts.values(), key=lambda m: (m.derive is not None, m.size or 0))
