"""The Python API: `make_plan` decides what to load, `Speculator.load` loads the pair once, then
`stream` or `generate` with any drafter. The names a front end imports are here; what a
generation is built from is in edgespec.speculator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Hashable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from edgespec.auto.prior import CostModel
from edgespec.auto.start import AutoSettings, Learned, start
from edgespec.engine.batch import PROMPT_CHUNK, Batch, Lane
from edgespec.engine.cache import CachedModel
from edgespec.engine.constraint import Constraint
from edgespec.engine.drafters import GRAMMAR, PREDICTION, Drafter, ModelDrafter
from edgespec.engine.events import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.engine.generate import DraftLength, GenerationConfig, Session
from edgespec.engine.protocol import supports_tree
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError
from edgespec.models import files
from edgespec.models.registry import Registry
from edgespec.options import (
    DRAFTERS,
    K_MAX,
    NEEDS_DRAFT_MODEL,
    TREE_WIDTH,
    AutoSwitches,
    DrafterKind,
    DrafterSpec,
    Drafting,
    check_k,
    check_max_tokens,
    parse_drafter,
)
from edgespec.planner import calibrate_later
from edgespec.planner.calibrate import Calibration
from edgespec.planner.decode_options import DecodeOptions
from edgespec.planner.load import load_models
from edgespec.planner.make import make_plan
from edgespec.planner.plan import DecodePlan
from edgespec.speculator import drafting, learning, prompts
from edgespec.speculator.prompts import Prompt, instruction_of
from edgespec.text.conversation import Conversation
from edgespec.text.infill_prompt import Chunk, InfillEnd, InfillPrompt, build_prompt, until_filled
from edgespec.text.project_memory import ProjectMemory
from edgespec.version import __version__

if TYPE_CHECKING:
    from edgespec.doctor import Report
    from edgespec.text.grammar import Grammar

# llama.cpp's llama.vim asks for 128 tokens of middle by default: an editor's completion.
INFILL_MAX_TOKENS = 128
# What the CLI (and any other front end) needs, in one place.
__all__ = [
    "DRAFTERS",
    "GRAMMAR",
    "NEEDS_DRAFT_MODEL",
    "PREDICTION",
    "AutoSwitches",
    "Chunk",
    "Conversation",
    "DecodeOptions",
    "DecodePlan",
    "DoneEvent",
    "DrafterKind",
    "DrafterSpec",
    "Drafting",
    "Event",
    "GenerationStats",
    "InfillPrompt",
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


def versions() -> dict[str, str]:
    from edgespec.llamacpp.backend import library_version

    return {"edgespec": __version__, "llama_cpp_python": library_version()}


def diagnose(smoke_model: Path | None = None) -> Report:
    """Every check of `edgespec doctor` (imported only when asked)."""
    from edgespec.doctor import diagnose as run_checks

    return run_checks(smoke_model)


def _text_of(events: Generator[Event, None, None]) -> str:
    parts = []
    for event in events:
        if isinstance(event, TokenEvent):
            parts.append(event.text)
        elif isinstance(event, DoneEvent):
            break
    return "".join(parts)


class Speculator:
    """A loaded target (and optional draft) model with the drafters built on them."""

    def __init__(
        self,
        target: Any,
        draft: Any | None,
        plan: DecodePlan | None = None,
        *,
        batch: Batch | None = None,
        auto_of: Speculator | None = None,
    ) -> None:
        """`batch`, `auto_of`: a lane's (`lanes`): the batch that decodes its passes, and the
        pair whose `auto` it shares."""
        self.target = target
        self.draft = draft
        self.plan = plan
        self.batch = batch
        self.session = Session(target)
        if batch is not None:
            self.session = Session(target, batch.join, target.seq, batch.carried)
        # The most leaves of a tree draft the target verifies in one pass (1: chains only).
        self.tree_width = TREE_WIDTH if supports_tree(target) else 1
        self._draft_cache = CachedModel(draft) if draft is not None else None
        self._cache_client: Hashable = None  # whose tokens the KV caches hold
        self._model_drafter = ModelDrafter(self._draft_cache) if self._draft_cache else None
        self._pass_load: Callable[[], tuple[int, int, int]] | None = None
        if batch is not None:
            self._pass_load = partial(batch.others, target.seq)
        # What `auto` learned across generations (None: not planned), shared by the lanes.
        self.auto_learned: Learned | None = None
        self._auto_model = False
        if auto_of is not None:
            self.auto_learned, self._auto_model = auto_of.auto_learned, auto_of._auto_model
        elif plan is not None and plan.calibration is not None:
            self._auto_from(plan, plan.calibration)

    def _auto_from(self, plan: DecodePlan, cal: Calibration) -> None:
        self.auto_learned, use_model = learning.planned(plan, cal)
        self._auto_model = use_model and self._draft_cache is not None

    @classmethod
    def load(
        cls,
        pair: str | None = None,
        *,
        plan: DecodePlan | None = None,
        progress: files.Progress | None = None,
        registry: Registry | None = None,
        drafter: str | DrafterSpec = DrafterKind.AUTO,
        k: int | None = None,
        keep_draft: bool = False,
        **options: Any,
    ) -> Speculator:
        """Load what `plan` says; without one, plan from `options` (`DecodeOptions`' fields)
        and `Drafting.of(drafter, k, keep_draft=keep_draft)`."""
        if plan is None:
            drafting = Drafting.of(drafter, k, keep_draft=keep_draft)
            plan = make_plan(
                DecodeOptions(pair=pair, **options), drafting, progress=progress, registry=registry
            )
        note = progress.note if progress is not None else None
        target, *draft = load_models(plan.target, plan.draft, plan.resources, note)
        return cls(target, draft[0] if draft else None, plan)

    def lanes(self, n: int) -> list[Speculator]:
        """`n` lanes of this pair (models loaded with `sequences` >= n), each on its own sequence
        of both caches, their passes decoded together by one `batch`; no trees."""
        batch = Batch(self.target, self._prompt_chunk)
        return [
            Speculator(
                Lane(self.target, seq),
                Lane(self.draft, seq) if self.draft is not None else None,
                self.plan,
                batch=batch,
                auto_of=self,
            )
            for seq in range(n)
        ]

    def _prompt_chunk(self, others: int) -> int:
        """The lanes' prompt chunk beside `others` tokens, priced at the learned costs."""
        learned = self.auto_learned
        return learned.costs.prompt_chunk(others) if learned is not None else PROMPT_CHUNK

    def enable_auto(
        self,
        costs: CostModel,
        *,
        use_model: bool,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        memory: ProjectMemory | None = None,
    ) -> None:
        """The `auto` drafter, choosing every round from `costs` (in target steps; learned from
        the rounds given the step in seconds), drafting from the draft model where `use_model`
        and it may pay, and from the project's past with a `memory`."""
        self._auto_model = use_model and self._draft_cache is not None
        self.auto_learned = learning.begin(costs, step_s=step_s, draft_tau=draft_tau, memory=memory)

    def drafter(self, name: str | DrafterSpec) -> Drafter:
        """The drafter `name` asks for, as a new generation's would start."""
        asked = parse_drafter(name)
        if asked.name is DrafterKind.AUTO:
            return self._start_auto(asked.switches, None)[0]
        return drafting.fixed_drafter(asked.name, self._model_drafter)

    def strategy(
        self,
        drafter: str | DrafterSpec | Drafter,
        k: int | DraftLength | None = None,
        *,
        instruction: str = "",
        client: Hashable = None,
        tree_width: int | None = None,
    ) -> tuple[Drafter, DraftLength]:
        """A generation's drafter and draft-length policy: `auto`'s started afresh (with the
        replacements `instruction` asks for, `client`'s earlier texts), else a fixed K."""
        asked = parse_drafter(drafter) if isinstance(drafter, str | DrafterSpec) else None
        if asked is not None and asked.name is DrafterKind.AUTO:
            switches = asked.switches
            hints = self.replacements(instruction) if switches.hints and instruction else []
            auto = self._start_auto(switches, k, hints, client, tree_width)
            return auto[0], auto[1] if isinstance(k, int | None) else k
        chosen = self.drafter(drafter) if isinstance(drafter, str | DrafterSpec) else drafter
        return chosen, drafting.fixed_k(chosen, k)

    def _start_auto(
        self,
        switches: AutoSwitches,
        k: int | DraftLength | None,
        hints: Sequence[tuple[list[int], list[int]]] = (),
        client: Hashable = None,
        tree_width: int | None = None,
    ) -> tuple[Drafter, DraftLength]:
        if self.auto_learned is None:
            raise ConfigError("the auto drafter was not planned: load with drafter='auto'")
        width = self.tree_width if switches.trees else 1
        settings = AutoSettings(
            k_max=check_k(k) if isinstance(k, int) else K_MAX,
            tree_width=width if tree_width is None else min(tree_width, width),
            switches=switches,
            hints=tuple((tuple(old), tuple(new)) for old, new in hints),
        )
        model = ModelDrafter(self._draft_cache) if self._auto_model and self._draft_cache else None
        return start(settings, self.auto_learned, client, model, self._pass_load)

    def prompt_tokens(
        self,
        prompt: Prompt,
        *,
        system: str | None = None,
        raw: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Text through the chat template (unless `raw`); messages always, with OpenAI's `tools`."""
        return prompts.prompt_tokens(self.target, prompt, system=system, raw=raw, tools=tools)

    def replacements(self, instruction: str) -> list[tuple[list[int], list[int]]]:
        """What an instruction asks to replace, as tokens, for the `auto` drafter's copies."""
        return prompts.replacement_tokens(self.target, instruction)

    def prediction_tokens(self, prediction: str | Sequence[int]) -> list[int]:
        """A predicted output as tokens; a ConfigError when the context cannot hold it."""
        return prompts.prediction_tokens(self.target, prediction)

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
        grammar: Grammar | Constraint | None = None,
        client: Hashable = None,
        tree_width: int | None = None,
        logprobs: int | None = None,
        prediction: str | Sequence[int] | None = None,
    ) -> Generator[Event, None, None]:
        """The engine's events: a TokenEvent per accepted token, RoundEvents, a DoneEvent.

        `drafter`: a name with auto's switches (`"auto:hints=0"`, or `DrafterSpec(name="auto",
        switches=AutoSwitches(hints=False))`), or a drafter object.
        `instruction`: the request whose replacements `auto`'s copies make (default: a text
        prompt, a conversation's last user message). `grammar`: a `Grammar` (or a compiled
        `Constraint`) every token keeps to. `client`: whose earlier texts `auto` drafts from,
        and whose tokens the caches may hold (another's start from empty caches).
        `tree_width`: the most leaves of `auto`'s trees. `logprobs`: each token's logprob and
        that many alternatives. `prediction`: text or tokens the answer will mostly repeat
        (OpenAI's predicted outputs), drafted as one more lookup (`none` ignores it)."""
        asked = instruction_of(prompt) if instruction is None else instruction
        tokens = self.prompt_tokens(prompt, system=system, raw=raw)
        lookup = drafting.prediction_drafter(prediction, self.target)  # its index: no lock held
        drafter = parse_drafter(drafter) if isinstance(drafter, str | DrafterSpec) else drafter
        auto = isinstance(drafter, DrafterSpec) and drafter.name is DrafterKind.AUTO
        if client is not None and self.auto_learned is not None and auto:
            self.auto_learned.memory.warm(client)  # its texts of earlier runs: no lock held
        config = GenerationConfig(
            max_tokens=max_tokens,
            stop=tuple(stop),
            sampling=sampling or SamplingParams(),
            logprobs=logprobs,
        )
        # A lane's: what the lanes share (what auto learned) and its cells are touched here,
        # never while a pass runs.
        with self.batch.lock if self.batch is not None else contextlib.nullcontext():
            chosen, policy = self.strategy(
                drafter, k, instruction=asked, client=client, tree_width=tree_width
            )
            chosen = drafting.predicted(chosen, lookup)
            constrained = drafting.constrained(grammar, drafter, chosen, self.target)
            # The caches hold one client's tokens at a time: a prefix another client left would
            # let a client time its first token to learn whether that prompt began as it guesses.
            if client != self._cache_client:
                self.empty_caches(client)
            return self.session.generate(tokens, chosen, config, policy, constrained)

    @property
    def cache_client(self) -> Hashable:
        """Whose tokens the KV caches hold (a lane's own cells)."""
        return self._cache_client

    def empty_caches(self, client: Hashable = None) -> None:
        """Empty both models' caches (a lane's own cells), which then hold `client`'s tokens."""
        self.session.reset()
        if self._draft_cache is not None:
            self._draft_cache.reset()
        self._cache_client = client

    def generate(self, prompt: Prompt, **kwargs: Any) -> str:
        """The text `stream` streams (its keyword arguments)."""
        return _text_of(self.stream(prompt, **kwargs))

    def infill_prompt(
        self,
        prefix: str,
        suffix: str = "",
        *,
        extra: Sequence[Chunk] = (),
        middle: str = "",
        max_tokens: int = INFILL_MAX_TOKENS,
    ) -> InfillPrompt:
        """The prompt for the gap between `prefix` and `suffix` (`extra` files as context,
        `middle` already typed) in the model's FIM tokens as llama.cpp's server lays it out, cut
        to fit the context; a ConfigError when the model has no FIM tokens."""
        return build_prompt(
            self.target, prefix, suffix, extra=extra, middle=middle, max_tokens=max_tokens
        )

    def stream_infill(
        self,
        prompt: InfillPrompt,
        *,
        drafter: str | DrafterSpec | Drafter = "auto",
        k: int | DraftLength | None = None,
        max_tokens: int = INFILL_MAX_TOKENS,
        stop: Sequence[str] = (),
        sampling: SamplingParams | None = None,
        budget_s: float | None = None,
        n_indent: int = 0,
        client: Hashable = None,
        logprobs: int | None = None,
    ) -> Generator[Event, None, None]:
        """The middle's events, ending where an editor wants: at the end of the FIM answer,
        where it repeats the suffix's first non-blank line, at a newline after `budget_s`
        seconds, at a line indented less than `n_indent`, or at `max_tokens`."""
        events = self.stream(
            prompt.tokens,
            drafter=drafter,
            k=k,
            max_tokens=max_tokens,
            stop=stop,
            sampling=sampling,
            instruction="",  # no instruction to read replacements from
            client=client,
            logprobs=logprobs,
        )
        end = InfillEnd(prompt, budget_s=budget_s, n_indent=n_indent)
        return until_filled(events, end, lambda: self.session.last_stats)

    def infill(
        self,
        prefix: str,
        suffix: str = "",
        *,
        extra: Sequence[Chunk] = (),
        middle: str = "",
        max_tokens: int = INFILL_MAX_TOKENS,
        **kwargs: Any,
    ) -> str:
        """The text for the gap between `prefix` and `suffix` (see `stream_infill`)."""
        prompt = self.infill_prompt(
            prefix, suffix, extra=extra, middle=middle, max_tokens=max_tokens
        )
        return _text_of(self.stream_infill(prompt, max_tokens=max_tokens, **kwargs))

    def reset(self, history: Sequence[Sequence[int]] = ()) -> None:
        """Forget the cached conversation and what auto learned from it; `history`: the new
        conversation's earlier texts, which auto drafts from."""
        self.empty_caches(self._cache_client)
        if self.auto_learned is not None:
            self.auto_learned.forget(history=history)

    @property
    def learned_step_s(self) -> float | None:
        """The target's step as `auto` has learned it from the rounds run so far (what verifying
        one token costs, in seconds); None without `auto`."""
        return None if self.auto_learned is None else self.auto_learned.costs.verify_s(1)

    def calibrate_pending(
        self, progress: files.Progress | None = None, before: Callable[[], None] | None = None
    ) -> Calibration | None:
        """Where `auto` started from guessed costs: `before()`, then this device measured and
        cached for later runs and `auto` started again from it (the caches reset); None when
        nothing was pending."""
        plan = calibrate_later.measure(self.plan, self.target, self.draft, progress, before)
        if plan is None or plan.calibration is None:
            return None
        self.plan = plan
        self.reset()
        self._auto_from(plan, plan.calibration)
        return plan.calibration

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
