"""The Python API: plan, load a pair once, then stream or generate text with any drafter.

from edgespec import Speculator
with Speculator.load() as spec:              # the default pair, pulled when absent
    print(spec.generate("Write a haiku about caches"))

`make_plan` is the helper every command builds its `DecodePlan` with; `Speculator.load(plan=...)`
loads what the plan says.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from edgespec import __version__, paths, rpc
from edgespec.chat import Conversation
from edgespec.diagnose import smoke
from edgespec.engine.cache import CachedModel
from edgespec.engine.drafters import (
    Drafter,
    EitherDrafter,
    HybridDrafter,
    ModelDrafter,
    NgramDrafter,
    NoDrafter,
)
from edgespec.engine.events import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.engine.generate import DraftLength, FixedK, GenerationConfig, Session
from edgespec.engine.hints import replacements
from edgespec.engine.protocol import supports_tree
from edgespec.engine.sampling import SamplingParams
from edgespec.engine.suffix import SuffixDrafter
from edgespec.errors import ConfigError
from edgespec.memory import ProjectMemory
from edgespec.models import files
from edgespec.models.compat import check_compatible
from edgespec.models.gguf import read_gguf
from edgespec.models.registry import Registry, load_registry
from edgespec.models.resolve import pair_refs
from edgespec.options import (
    DEFAULT_K,
    DRAFTERS,
    K_MAX,
    NEEDS_DRAFT_MODEL,
    TREE_WIDTH,
    AutoSwitches,
    DrafterSpec,
    check_k,
    check_max_tokens,
    parse_drafter,
)
from edgespec.planner import calibrate as calibration_store
from edgespec.planner.adaptive import AdaptiveDraftLength
from edgespec.planner.calibrate import Calibration, calibrate
from edgespec.planner.costs import CostModel
from edgespec.planner.hardware import cpu_model, probe
from edgespec.planner.plan import (
    DecodeOptions,
    DecodePlan,
    Fit,
    LinkCost,
    Resources,
    choose_resources,
    cost_model,
    decide,
)

HUGE_PAGES_ENV = "EDGESPEC_HUGE_PAGES"
FLASH_ATTN_ENV = "EDGESPEC_FLASH_ATTN"
CALIBRATION_TEXT = (
    "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n"
    "    middle = len(items) // 2\n    left = merge_sort(items[:middle])\n"
    "    right = merge_sort(items[middle:])\n    return merge(left, right)\n\n"
) * 8

if TYPE_CHECKING:
    from edgespec.diagnose.checks import Report
    from edgespec.llamacpp import LoadOptions

Prompt = str | Sequence[dict[str, str]] | Sequence[int]
# What the CLI (and any other front end) needs, in one place.
__all__ = [
    "DRAFTERS",
    "NEEDS_DRAFT_MODEL",
    "AutoSwitches",
    "Conversation",
    "DecodeOptions",
    "DecodePlan",
    "DoneEvent",
    "DrafterSpec",
    "Event",
    "GenerationStats",
    "RoundEvent",
    "SamplingParams",
    "Speculator",
    "TokenEvent",
    "check_k",
    "check_max_tokens",
    "diagnose",
    "instruction_of",
    "make_plan",
    "versions",
]


def _calibration_key(target: Path, draft: Path | None, resources: Resources) -> str:
    """Calibration results hold for these exact files on this backend with these settings."""
    from edgespec.llamacpp import library_version

    return calibration_store.cache_key(
        machine=f"{cpu_model()} x{resources.hardware.logical_cores}",
        target=files.fingerprint(target),
        draft=files.fingerprint(draft) if draft is not None else None,
        backend=resources.hardware.backend,
        threads=resources.n_threads,
        gpu_layers=resources.n_gpu_layers,
        edgespec=__version__,
        llama_cpp=library_version(),
        calibration=2,  # what is measured: tau at every n the policy may choose
        flash_attn=resources.target_flash_attn,
        # Only with servers: a local calibration keeps its key.
        **({"rpc": [str(s.endpoint) for s in resources.servers]} if resources.servers else {}),
    )


def _resources(target: Path, draft: Path | None, options: DecodeOptions) -> Resources:
    """What fits and with which settings, from the files' metadata: no weights are read."""
    from edgespec.llamacpp import supports_gpu_offload, system_info

    flash_attn = _switch(FLASH_ATTN_ENV)
    t_info = read_gguf(target)
    d_info = read_gguf(draft) if draft is not None else None
    if d_info is not None:
        check_compatible(t_info, d_info)
    return choose_resources(
        probe(supports_gpu_offload(), system_info()),
        t_info,
        d_info,
        n_ctx=options.n_ctx,
        n_threads=options.n_threads,
        n_gpu_layers=options.n_gpu_layers,
        servers=rpc.probe_all(options.servers),
        flash_attn_asked=flash_attn,
    )


def _load_models(
    target: Path, draft: Path | None, resources: Resources, note: Callable[[str], None] | None
) -> list[Any]:
    """The target (and draft) loaded with the planned settings, once this llama.cpp build has
    passed its smoke test (the smallest of the files is the one tested)."""
    from edgespec.llamacpp import LlamaModel

    loading = [target, *([draft] if draft is not None else [])]
    smoke.ensure_works(min(loading, key=lambda p: p.stat().st_size), note)
    options = _load_options(resources)
    # The target verifies tree drafts; the draft model reads one sequence.
    target_options = replace(options, tree_width=TREE_WIDTH)
    if not resources.servers:
        return [LlamaModel(target, target_options), *(LlamaModel(p, options) for p in loading[1:])]
    # The target on the RPC servers, in a child process (see edgespec.remote); the draft here.
    from edgespec.remote import RemoteTarget

    servers = [s.endpoint for s in resources.servers]
    remote = replace(
        options,
        n_gpu_layers=resources.n_gpu_layers,
        rpc=tuple(map(str, servers)),
        tensor_split=resources.split,
        flash_attn=resources.target_flash_attn,
    )
    models: list[Any] = [RemoteTarget(target, remote, servers, note)]
    try:
        return models + [LlamaModel(path, options) for path in loading[1:]]
    except BaseException:
        models[0].close()
        raise


def _load_options(resources: Resources) -> LoadOptions:
    """How a model is loaded on this machine (the target verifies trees on top of it)."""
    from edgespec.llamacpp import LoadOptions

    return LoadOptions(
        resources.n_ctx,
        resources.n_threads,
        resources.draft_gpu_layers,
        huge_pages=_switch(HUGE_PAGES_ENV) is True,
        flash_attn=resources.flash_attn,
    )


def _switch(name: str) -> bool | None:
    """An on/off setting from the environment: 1, 0, or unset (None)."""
    value = os.environ.get(name, "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"{name} must be 0 or 1, not {value!r}")
    return None if value == "" else value == "1"


def _measure(
    target: Path, draft: Path | None, resources: Resources, progress: files.Progress
) -> Calibration:
    """Calibrate this device: the models are loaded for the measurement only, then closed."""
    progress.note("measuring this device for the auto drafter (once; cached afterwards)")
    models = _load_models(target, draft, resources, progress.note)
    try:
        context = models[0].tokenize(CALIBRATION_TEXT, add_special=False)
        return calibrate(models[0], models[1] if draft else None, context, max_n=K_MAX)
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
    """This device's costs for `auto`: cached, else measured and cached; or, where asked to
    calibrate later, guessed from the files' sizes for now (never with RPC servers: what the
    link costs is what their plan is about)."""
    key, cached = _cached_calibration(target, draft, resources)
    if cached is not None and not options.recalibrate:
        return cached, True
    measured_draft = draft if resources.fit == Fit.BOTH else None
    if options.calibrate_later and not options.recalibrate and not resources.servers:
        size = measured_draft.stat().st_size if measured_draft is not None else None
        guess = calibration_store.prior(target.stat().st_size, size)
        where = {"key": key, "draft": str(measured_draft) if measured_draft else None}
        return replace(guess, key=where), False
    cal = _measure(target, measured_draft, resources, progress)
    cal = replace(cal, key={"key": key})
    calibration_store.save(paths.calibration_dir(), key, cal)
    return cal, False


def make_plan(
    options: DecodeOptions | None = None,
    *,
    progress: files.Progress | None = None,
    registry: Registry | None = None,
) -> DecodePlan:
    """Find (or pull) the models, check the pair and the memory from metadata, calibrate for
    `auto` (once per device), and decide: the plan every command loads from."""
    options = (options or DecodeOptions()).checked()
    progress = progress or files.Silent()
    registry = registry or load_registry()
    t_ref, d_ref = pair_refs(registry, options.pair, options.target, options.draft)
    if options.needs_draft_model and d_ref is None:
        raise ConfigError(
            f"drafter {options.drafter!r} needs a draft model; give --draft or a --pair"
        )
    target = t_ref.locate(offline=options.offline, progress=progress)
    draft = None
    if d_ref is not None and options.wants_draft:
        draft = d_ref.locate(offline=options.offline, progress=progress)
    resources = _resources(target, draft, options)
    cal, cached = None, False
    if options.drafter_name == "auto":
        cal, cached = _calibration(target, draft, resources, options, progress)
    link = _link_cost(target, draft, options, resources, cal)
    return decide(options, target, draft, resources, cal, cached, link)


def _link_cost(
    target: Path,
    draft: Path | None,
    options: DecodeOptions,
    resources: Resources,
    calibration: Calibration | None,
) -> LinkCost | None:
    """With RPC servers: the measured target step, against this machine's own (if measured)."""
    if not resources.servers or calibration is None:
        return None
    here = _resources(target, draft, replace(options, rpc=None))
    local = _cached_calibration(target, draft, here)[1]
    return LinkCost(
        calibration.target_step_s,
        None if local is None else local.target_step_s,
        max(s.rtt_s for s in resources.servers),
    )


def calibration_for(target: Path, draft: Path | None) -> Calibration | None:
    """The cached calibration `auto` would use for these files with the default settings."""
    return _cached_calibration(target, draft, _resources(target, draft, DecodeOptions()))[1]


def versions() -> dict[str, str]:
    from edgespec.llamacpp import library_version

    return {"edgespec": __version__, "llama_cpp_python": library_version()}


def diagnose(smoke_model: Path | None = None) -> Report:
    """Every check of `edgespec doctor` (imported here, when asked: it reads the CPU)."""
    from edgespec.diagnose.checks import diagnose as run_checks

    return run_checks(smoke_model)


def instruction_of(prompt: Prompt) -> str:
    """A text prompt itself, a conversation's last user message; nothing in token ids."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else ""


def _switches(drafter: str | DrafterSpec | Drafter) -> AutoSwitches:
    """The auto features a drafter as asked for runs (all, for a drafter object)."""
    if isinstance(drafter, str | DrafterSpec):
        return parse_drafter(drafter).switches
    return AutoSwitches()


class Speculator:
    """A loaded target (and optional draft) model with the drafters built on them."""

    def __init__(self, target: Any, draft: Any | None, plan: DecodePlan | None = None) -> None:
        self.target = target
        self.draft = draft
        self.plan = plan
        self.session = Session(target)
        # The most leaves of a tree draft the target verifies in one pass (1: chains only).
        self.tree_width = TREE_WIDTH if supports_tree(target) else 1
        self._draft_cache = CachedModel(draft) if draft is not None else None
        self._model_drafter = ModelDrafter(self._draft_cache) if self._draft_cache else None
        self.auto: EitherDrafter | None = None
        self._auto_lookups: EitherDrafter | None = None  # auto:model=0, on the same suffix
        self.suffix: SuffixDrafter | None = None
        self.auto_policy: AdaptiveDraftLength | None = None
        if plan is not None and plan.calibration is not None:
            self._auto_from(plan, plan.calibration)

    def _auto_from(self, plan: DecodePlan, cal: Calibration) -> None:
        use_model = plan.choice is not None and plan.choice.use_model
        memory = None
        if plan.memory is not None:
            memory = ProjectMemory(plan.memory, files.fingerprint(plan.target))
        self.enable_auto(
            cost_model(cal),
            use_model=use_model,
            step_s=cal.target_step_s,
            draft_tau=cal.draft_tau,
            memory=memory,
        )

    @classmethod
    def load(
        cls,
        pair: str | None = None,
        *,
        plan: DecodePlan | None = None,
        progress: files.Progress | None = None,
        registry: Registry | None = None,
        **options: Any,
    ) -> Speculator:
        """Load what `plan` says; without a plan, make one from `options` (the fields of
        `DecodeOptions`: target, draft, drafter, k, n_ctx, keep_draft, offline...)."""
        if plan is None:
            plan = make_plan(
                DecodeOptions(pair=pair, **options), progress=progress, registry=registry
            )
        note = progress.note if progress is not None else None
        target, *draft = _load_models(plan.target, plan.draft, plan.resources, note)
        return cls(target, draft[0] if draft else None, plan)

    def enable_auto(
        self,
        costs: CostModel,
        *,
        use_model: bool,
        k_max: int = K_MAX,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        memory: ProjectMemory | None = None,
    ) -> None:
        """The `auto` drafter: suffix drafts from text already seen (and the draft model when it
        may pay), with the option and K chosen every round from `costs` (in target steps);
        given the target step in seconds, the costs are then learned from the rounds that run.
        With a `memory`, suffix drafts also come from, and go to, the project's past."""
        model = ModelDrafter(self._draft_cache) if use_model and self._draft_cache else None
        self.suffix = SuffixDrafter(
            past=memory.load() if memory else (), on_done=memory.add if memory else None
        )
        self.auto = EitherDrafter(self.suffix, model)
        self._auto_lookups = EitherDrafter(self.suffix)
        self.auto_policy = AdaptiveDraftLength(
            costs,
            model,
            k_max=k_max,
            step_s=step_s,
            draft_tau=draft_tau,
            tree_width=self.tree_width,
        )

    # --- drafters ----------------------------------------------------------------------

    def drafter(self, name: str | DrafterSpec) -> Drafter:
        """The drafter `name` asks for (`auto:model=0`: auto without the draft model)."""
        asked = parse_drafter(name)
        name = asked.name
        if name == "auto":
            if self.auto is None or self._auto_lookups is None:
                raise ConfigError("the auto drafter was not planned: load with drafter='auto'")
            return self.auto if asked.switches.model else self._auto_lookups
        if name == "none":
            return NoDrafter()
        if name == "ngram":
            return NgramDrafter()
        if self._model_drafter is None:
            raise ConfigError(f"drafter {name!r} needs a draft model; give --draft or a --pair")
        if name == "model":
            return self._model_drafter
        return HybridDrafter(NgramDrafter(), self._model_drafter)

    def strategy(
        self, drafter: str | DrafterSpec | Drafter, k: int | DraftLength | None = None
    ) -> tuple[Drafter, DraftLength]:
        """The drafter and its draft-length policy: auto's adaptive one (running the features
        its switches leave on), else a fixed K."""
        chosen = self.drafter(drafter) if isinstance(drafter, str | DrafterSpec) else drafter
        auto = self._is_auto(chosen)
        switches = _switches(drafter)
        if auto and self.suffix is not None:
            self.suffix.resume, self.suffix.learn_edits = switches.resume, switches.edits
        if not isinstance(k, int | None):
            return chosen, k
        if auto:
            assert self.auto_policy is not None
            self.auto_policy.k_max = K_MAX if k is None else check_k(k)
            self.auto_policy.tree_width = self.tree_width if switches.trees else 1
            return chosen, self.auto_policy
        return chosen, FixedK(DEFAULT_K.get(chosen.name, K_MAX) if k is None else k)

    def _is_auto(self, drafter: Drafter) -> bool:
        return self.auto is not None and (drafter is self.auto or drafter is self._auto_lookups)

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

    def replacements(self, instruction: str) -> list[tuple[list[int], list[int]]]:
        """What an instruction asks to replace (hints.py), as tokens: each text as it reads
        after a space and after anything else, for the `auto` drafter's copies to make."""
        pairs = []
        for old, new in replacements(instruction):
            for before in ("", " "):
                pairs.append((self._tokens(before + old), self._tokens(before + new)))
        return pairs

    def _tokens(self, text: str) -> list[int]:
        return list(self.target.tokenize(text, add_special=False, parse_special=False))

    # --- generation --------------------------------------------------------------------

    def stream(
        self,
        prompt: Prompt,
        *,
        drafter: str | DrafterSpec | Drafter = "auto",
        k: int | DraftLength | None = None,
        max_tokens: int = 512,
        stop: Sequence[str] = (),
        sampling: SamplingParams | None = None,
        system: str | None = None,
        raw: bool = False,
        instruction: str | None = None,
    ) -> Generator[Event, None, None]:
        """Yield the engine's events: TokenEvent per accepted token, RoundEvent, DoneEvent.

        `drafter`: a name, with auto's switches (`"auto:hints=0:trees=0"`, or
        `DrafterSpec("auto", AutoSwitches(hints=False))`), or a drafter object.

        `instruction`: the user's request in the prompt, whose asked-for replacements the
        `auto` drafter's copies make (`replacements`); by default a text prompt, or a
        conversation's last user message."""
        chosen, policy = self.strategy(drafter, k)
        config = GenerationConfig(
            max_tokens=max_tokens, stop=tuple(stop), sampling=sampling or SamplingParams()
        )
        tokens = self.prompt_tokens(prompt, system=system, raw=raw)
        if self._is_auto(chosen) and self.suffix is not None:
            asked = instruction_of(prompt) if instruction is None else instruction
            hints = _switches(drafter).hints
            self.suffix.expect(self.replacements(asked) if hints else ())
        return self.session.generate(tokens, chosen, config, policy)

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
        if self.auto_policy is not None:
            self.auto_policy.forget()
        if self.suffix is not None:
            self.suffix.forget()

    @property
    def calibration_pending(self) -> bool:
        """Whether `auto` runs on costs guessed from the files (`calibrate_later`)."""
        cal = self.plan.calibration if self.plan is not None else None
        return cal is not None and not cal.measured

    def calibrate_pending(self, progress: files.Progress | None = None) -> Calibration | None:
        """Where `auto` started from guessed costs, measure this device now with the loaded
        target (and the draft, loaded for the measurement if the plan did not load it), cache
        the result for later runs and let `auto` start from it; None when nothing was pending.
        Both models' caches and what `auto` learned are reset."""
        if not self.calibration_pending:
            return None
        plan = self.plan
        assert plan is not None and plan.calibration is not None
        (progress or files.Silent()).note(
            "measuring this device for the auto drafter (once; later runs start from it)"
        )
        where = plan.calibration.key
        draft_path = where.get("draft")
        borrowed = None
        if draft_path is not None and self.draft is None:
            from edgespec.llamacpp import LlamaModel

            borrowed = LlamaModel(draft_path, _load_options(plan.resources))
        try:
            context = self.target.tokenize(CALIBRATION_TEXT, add_special=False)
            draft = None if draft_path is None else (borrowed or self.draft)
            cal = calibrate(self.target, draft, context, max_n=K_MAX)
        finally:
            if borrowed is not None:
                borrowed.close()
        cal = replace(cal, key={"key": where["key"]})
        calibration_store.save(paths.calibration_dir(), where["key"], cal)
        self.plan = replace(plan, calibration=cal)
        self.reset()
        self._auto_from(self.plan, cal)
        return cal

    def close(self) -> None:
        for model in (self.target, self.draft):
            close = getattr(model, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> Speculator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
