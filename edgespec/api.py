"""The Python API: load a pair once, then stream or generate text with any drafter.

from edgespec import Speculator
with Speculator.load() as spec:              # the default pair, pulled when absent
    print(spec.generate("Write a haiku about caches"))
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from edgespec import __version__, paths
from edgespec.diagnose import smoke
from edgespec.engine.cache import CachedModel
from edgespec.engine.drafters import (
    DRAFTER_NAMES,
    Drafter,
    HybridDrafter,
    ModelDrafter,
    NgramDrafter,
    NoDrafter,
)
from edgespec.engine.events import DoneEvent, Event, TokenEvent
from edgespec.engine.generate import DraftLength, GenerationConfig, Session
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError
from edgespec.models import files
from edgespec.models.compat import check_compatible
from edgespec.models.gguf import read_gguf
from edgespec.models.registry import Registry, load_registry
from edgespec.models.resolve import pair_refs
from edgespec.planner import calibrate as calibration_store
from edgespec.planner.adaptive import MAX_NGRAM, AdaptiveDrafter
from edgespec.planner.calibrate import Calibration, calibrate
from edgespec.planner.hardware import probe
from edgespec.planner.plan import (
    K_MAX,
    DrafterChoice,
    Resources,
    choose_drafters,
    choose_resources,
    cost_model,
)

DRAFTERS = ("auto", *DRAFTER_NAMES)
# Draft lengths used for fixed drafters when none is given. A model draft is cut short by its
# own confidence (p_min), so its K is a cap; n-gram drafts cost nothing to make, only to verify.
# `auto` chooses K itself every round, up to K_MAX.
DEFAULT_K = {"model": 4, "ngram": 8, "hybrid": 8, "none": 0, "auto": K_MAX}
CALIBRATION_TEXT = (
    "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n"
    "    middle = len(items) // 2\n    left = merge_sort(items[:middle])\n"
    "    right = merge_sort(items[middle:])\n    return merge(left, right)\n\n"
) * 8

Prompt = str | Sequence[dict[str, str]] | Sequence[int]


@dataclass(frozen=True)
class LoadedPaths:
    target: Path
    draft: Path | None


@dataclass(frozen=True)
class AutoPlan:
    calibration: Calibration
    cached: bool
    choice: DrafterChoice


def _calibration_key(target: Path, draft: Path | None, resources: Resources) -> str:
    """Calibration results hold for these exact files on this backend with these settings."""
    from edgespec.llamacpp import library_version

    return calibration_store.cache_key(
        target=files.fingerprint(target),
        draft=files.fingerprint(draft) if draft is not None else None,
        backend=resources.hardware.backend,
        threads=resources.n_threads,
        gpu_layers=resources.n_gpu_layers,
        edgespec=__version__,
        llama_cpp=library_version(),
    )


def calibration_for(target: Path, draft: Path | None) -> Calibration | None:
    """The cached calibration `auto` would use for these files with the default settings."""
    from edgespec.llamacpp import supports_gpu_offload, system_info

    t_info = read_gguf(target)
    d_info = read_gguf(draft) if draft is not None else None
    resources = choose_resources(probe(supports_gpu_offload(), system_info()), t_info, d_info)
    key = _calibration_key(target, draft if resources.fit == "both" else None, resources)
    return calibration_store.load_cached(paths.calibration_dir(), key)


class Speculator:
    """A loaded target (and optional draft) model with the drafters built on them."""

    def __init__(
        self, target: Any, draft: Any | None, paths: LoadedPaths, resources: Resources | None = None
    ) -> None:
        self.target = target
        self.draft = draft
        self.paths = paths
        self.resources = resources
        self.session = Session(target)
        self._draft_cache = CachedModel(draft) if draft is not None else None
        self._model_drafter = ModelDrafter(self._draft_cache) if self._draft_cache else None
        self.auto: AdaptiveDrafter | None = None
        self.auto_plan: AutoPlan | None = None

    @classmethod
    def load(
        cls,
        pair: str | None = None,
        *,
        target: str | None = None,
        draft: str | None = None,
        drafter: str = "auto",
        keep_draft: bool = False,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        offline: bool = False,
        recalibrate: bool = False,
        progress: files.Progress | None = None,
        registry: Registry | None = None,
    ) -> Speculator:
        """Find (or pull) the models, check the pair and the memory from metadata, then load.

        With drafter="auto" the planner calibrates this device (or reuses the cached result)
        and loads the draft model only if it can pay; keep_draft=True keeps it loaded anyway.
        """
        from edgespec.llamacpp import LlamaModel, LoadOptions, supports_gpu_offload, system_info

        if drafter not in DRAFTERS:
            raise ConfigError(f"unknown drafter {drafter!r}; choose from {', '.join(DRAFTERS)}")
        registry = registry or load_registry()
        t_ref, d_ref = pair_refs(registry, pair, target, draft)
        needs_model = drafter in ("model", "hybrid")
        if needs_model and d_ref is None:
            raise ConfigError(f"drafter {drafter!r} needs a draft model; give --draft or a --pair")
        wants_draft = d_ref is not None and (needs_model or drafter == "auto" or keep_draft)
        t_path = t_ref.locate(offline=offline, progress=progress)
        d_path = d_ref.locate(offline=offline, progress=progress) if wants_draft and d_ref else None
        t_info = read_gguf(t_path)
        d_info = read_gguf(d_path) if d_path is not None else None
        if d_info is not None:
            check_compatible(t_info, d_info)
        hardware = probe(supports_gpu_offload(), system_info())
        resources = choose_resources(
            hardware, t_info, d_info, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers
        )
        if needs_model and resources.fit != "both":
            raise ConfigError(
                f"the draft model does not fit next to the target "
                f"({resources.memory.both / 1e9:.2f} GB needed, "
                f"{resources.memory.budget / 1e9:.2f} GB usable); use --drafter ngram"
            )
        options = LoadOptions(
            n_ctx=resources.n_ctx,
            n_threads=resources.n_threads,
            n_gpu_layers=resources.n_gpu_layers,
        )
        key, cached = "", None
        if drafter == "auto":
            key = _calibration_key(t_path, d_path if resources.fit == "both" else None, resources)
            if not recalibrate:
                cached = calibration_store.load_cached(paths.calibration_dir(), key)
        # With a cached calibration that rules the draft model out, it is not even loaded.
        load_draft = (
            d_path is not None
            and resources.fit == "both"
            and (
                drafter != "auto"
                or keep_draft
                or cached is None
                or choose_drafters(cached, resources.fit).use_model
            )
        )
        loading = [t_path, *([d_path] if load_draft and d_path is not None else [])]
        smoke.ensure_works(
            min(loading, key=lambda p: p.stat().st_size),
            progress.note if progress is not None else None,
        )
        t_model = LlamaModel(t_path, options)
        d_model = LlamaModel(d_path, options) if load_draft and d_path is not None else None
        spec = cls(t_model, d_model, LoadedPaths(t_path, d_path), resources)
        if drafter == "auto":
            spec._plan_auto(key, cached, keep_draft or needs_model, progress)
        return spec

    def _plan_auto(
        self,
        key: str,
        cached: Calibration | None,
        keep_draft: bool,
        progress: files.Progress | None,
    ) -> None:
        """Calibrate unless `cached`, choose the drafters, build the auto drafter."""
        assert self.resources is not None
        cal = cached
        if cal is None:
            if progress is not None:
                progress.note(
                    "measuring this device for the auto drafter (once; cached afterwards)"
                )
            context = self.target.tokenize(CALIBRATION_TEXT, add_special=False)
            self.reset()
            measured = calibrate(self.target, self.draft, context, max_n=K_MAX)
            cal = Calibration(
                measured.target_step_s,
                measured.tau,
                measured.draft_step_s,
                measured.seconds,
                {"key": key},
            )
            calibration_store.save(paths.calibration_dir(), key, cal)
        choice = choose_drafters(cal, self.resources.fit if cal.c is not None else "target")
        if not choice.use_model and not keep_draft and self.draft is not None:
            self.draft.close()
            self.draft = None
            self._draft_cache = self._model_drafter = None
        model = (
            ModelDrafter(self._draft_cache)
            if choice.use_model and self._draft_cache is not None
            else None
        )
        self.auto = AdaptiveDrafter(
            cost_model(cal), NgramDrafter(max_ngram=MAX_NGRAM), model, k_max=K_MAX
        )
        self.auto_plan = AutoPlan(cal, cached is not None, choice)

    # --- drafters ----------------------------------------------------------------------

    def drafter(self, name: str) -> Drafter:
        if name == "auto":
            if self.auto is None:
                raise ConfigError("the auto drafter needs Speculator.load(drafter='auto')")
            return self.auto
        if name not in DRAFTER_NAMES:
            raise ConfigError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)}")
        if name == "none":
            return NoDrafter()
        if name == "ngram":
            return NgramDrafter()
        if self._model_drafter is None:
            raise ConfigError(f"drafter {name!r} needs a draft model; give --draft or a --pair")
        if name == "model":
            return self._model_drafter
        return HybridDrafter(NgramDrafter(), self._model_drafter)

    # --- prompts -----------------------------------------------------------------------

    def prompt_tokens(
        self, prompt: Prompt, *, system: str | None = None, raw: bool = False
    ) -> list[int]:
        """Text goes through the model's chat template (unless raw); messages always do."""
        if isinstance(prompt, str):
            if raw:
                return list(self.target.tokenize(prompt, add_special=True, parse_special=False))
            messages = [{"role": "system", "content": system}] if system else []
            messages.append({"role": "user", "content": prompt})
            return list(self.target.apply_chat_template(messages))
        items = list(prompt)
        if items and isinstance(items[0], dict):
            return list(self.target.apply_chat_template(items))
        return [int(t) for t in cast(list[int], items)]

    # --- generation --------------------------------------------------------------------

    def stream(
        self,
        prompt: Prompt,
        *,
        drafter: str | Drafter = "auto",
        k: int | DraftLength | None = None,
        max_tokens: int = 512,
        stop: Sequence[str] = (),
        sampling: SamplingParams | None = None,
        system: str | None = None,
        raw: bool = False,
    ) -> Iterator[Event]:
        """Yield the engine's events: TokenEvent per accepted token, RoundEvent, DoneEvent."""
        chosen = self.drafter(drafter) if isinstance(drafter, str) else drafter
        if k is None:
            k = DEFAULT_K.get(chosen.name, K_MAX)
        config = GenerationConfig(
            max_tokens=max_tokens, stop=tuple(stop), sampling=sampling or SamplingParams()
        )
        tokens = self.prompt_tokens(prompt, system=system, raw=raw)
        return self.session.generate(tokens, chosen, config, k)

    def generate(self, prompt: Prompt, **kwargs: Any) -> str:
        parts = []
        for event in self.stream(prompt, **kwargs):
            if isinstance(event, TokenEvent):
                parts.append(event.text)
            elif isinstance(event, DoneEvent):
                break
        return "".join(parts)

    def reset(self) -> None:
        """Forget the cached conversation in both models, and what auto learned from it."""
        self.session.reset()
        if self._draft_cache is not None:
            self._draft_cache.reset()
        if self.auto is not None:
            self.auto.forget()

    def close(self) -> None:
        for model in (self.target, self.draft):
            if model is not None:
                model.close()

    def __enter__(self) -> Speculator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
