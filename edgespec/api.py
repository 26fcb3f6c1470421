"""The Python API: load a pair once, then stream or generate text with any drafter.

from edgespec import Speculator
with Speculator.load() as spec:              # the default pair, pulled when absent
    print(spec.generate("Write a haiku about caches", drafter="ngram"))
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from edgespec import hub
from edgespec.compat import check_compatible
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
from edgespec.gguf_meta import read_gguf
from edgespec.registry import Registry, load_registry
from edgespec.resolve import pair_refs

# Draft lengths used when none is given. A model draft is cut short by its own confidence
# (p_min), so its K is a cap; n-gram drafts cost nothing to make, only to verify.
DEFAULT_K = {"model": 4, "ngram": 8, "hybrid": 8, "none": 0}
# Until the planner decides per device, "auto" is the draft-free n-gram lookup: it never needs
# a second model and is the configuration measured to win on this kind of CPU.
AUTO_FALLBACK = "ngram"

Prompt = str | Sequence[dict[str, str]] | Sequence[int]


@dataclass(frozen=True)
class LoadedPaths:
    target: Path
    draft: Path | None


class Speculator:
    """A loaded target (and optional draft) model with the drafters built on them."""

    def __init__(self, target: Any, draft: Any | None, paths: LoadedPaths) -> None:
        self.target = target
        self.draft = draft
        self.paths = paths
        self.session = Session(target)
        self._model_drafter = ModelDrafter(draft) if draft is not None else None

    @classmethod
    def load(
        cls,
        pair: str | None = None,
        *,
        target: str | None = None,
        draft: str | None = None,
        with_draft: bool = True,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        offline: bool = False,
        progress: hub.Progress | None = None,
        registry: Registry | None = None,
    ) -> Speculator:
        """Find (or pull) the models, check the pair from metadata, then load the weights."""
        from edgespec.llamacpp import LlamaModel, LoadOptions

        if n_ctx < 16:
            raise ConfigError(f"context size must be at least 16 tokens, got {n_ctx}")
        registry = registry or load_registry()
        t_ref, d_ref = pair_refs(registry, pair, target, draft)
        t_path = t_ref.locate(offline=offline, progress=progress)
        d_path = None
        if with_draft and d_ref is not None:
            d_path = d_ref.locate(offline=offline, progress=progress)
            check_compatible(read_gguf(t_path), read_gguf(d_path))
        options = LoadOptions(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers)
        t_model = LlamaModel(t_path, options)
        d_model = LlamaModel(d_path, options) if d_path is not None else None
        return cls(t_model, d_model, LoadedPaths(t_path, d_path))

    # --- drafters ----------------------------------------------------------------------

    def drafter(self, name: str) -> Drafter:
        if name == "auto":
            name = AUTO_FALLBACK
        if name not in DRAFTER_NAMES:
            raise ConfigError(
                f"unknown drafter {name!r}; choose from auto, {', '.join(DRAFTER_NAMES)}"
            )
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
            k = DEFAULT_K[chosen.name]
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
        """Forget the cached conversation in both models."""
        self.session.reset()
        if self._model_drafter is not None:
            self._model_drafter.reset()

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
