"""From what the user typed (a pair, a registry model name, a path) to GGUF files on disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import ConfigError, FetchError
from edgespec.models import derive, files, stores
from edgespec.models.gguf import check_gguf
from edgespec.models.registry import ModelSpec, Registry

NO_DRAFT = "none"  # --draft none: no draft model, none searched for


@dataclass(frozen=True)
class ModelRef:
    """A registry model or a local GGUF file."""

    name: str
    spec: ModelSpec | None = None
    path: Path | None = None

    def locate(
        self,
        *,
        quantize: derive.Quantize,
        offline: bool = False,
        progress: files.Progress | None = None,
    ) -> Path:
        """The file on disk: checked, fetched, or made by `quantize` (llama.cpp's quantizer,
        handed down: this package sits below the adapter)."""
        if self.path is not None:
            check_gguf(self.path)
            stores.check_first_part(self.path)
            return self.path
        assert self.spec is not None
        if self.spec.derive is not None:
            return derive.fetch(
                self.spec, offline=offline, progress=progress, quantize=quantize
            ).path
        return files.fetch(self.spec, offline=offline, progress=progress).path


def find_local(spec: ModelSpec, progress: files.Progress | None = None) -> files.Located | None:
    """The model if it is complete and verified on disk, fetched or derived here."""
    if spec.derive is not None:
        return derive.find_local(spec, progress)
    return files.find_local(spec, progress)


def model_ref(arg: str, registry: Registry) -> ModelRef:
    """A registry name, a store's (`ollama:`, `hf:`, `lmstudio:`), else a path (anything
    ending in .gguf or that exists)."""
    if arg in registry.models:
        return ModelRef(arg, spec=registry.models[arg])
    found = stores.lookup(arg)
    if found is not None:
        return ModelRef(arg, path=found) if isinstance(found, Path) else ModelRef(arg, spec=found)
    path = Path(arg).expanduser()
    if arg.endswith(".gguf") or path.exists() or "/" in arg:
        if not path.exists():
            raise FetchError(f"model file not found: {path}")
        return ModelRef(path.name, path=path)
    registry.model(arg)  # raises the "unknown model" message
    raise AssertionError("unreachable")


def pair_refs(
    registry: Registry, pair: str | None, target: str | None, draft: str | None
) -> tuple[ModelRef, ModelRef | None]:
    """--pair picks both models; --target/--draft override one or both.

    `--target` alone gives no draft model here (the planner searches for one); `--draft none`
    none at all.
    """
    if draft == NO_DRAFT:
        if target:
            return model_ref(target, registry), None
        chosen = registry.pair(pair).target
        return ModelRef(chosen.name, spec=chosen), None
    if target is not None and pair is None:
        return model_ref(target, registry), (model_ref(draft, registry) if draft else None)
    spec = registry.pair(pair)
    t = model_ref(target, registry) if target else ModelRef(spec.target.name, spec=spec.target)
    d = model_ref(draft, registry) if draft else ModelRef(spec.draft.name, spec=spec.draft)
    if t.path is not None and t.path == d.path:
        raise ConfigError("the draft and the target are the same file")
    return t, d
