"""The Python API: plan, load a pair once, then stream or generate text with any drafter.

from edgespec import Speculator
with Speculator.load() as spec:              # the default pair, pulled when absent
    print(spec.generate("Write a haiku about caches"))

`make_plan` (edgespec.planner.make) is the helper every command builds its `DecodePlan` with;
`Speculator.load(plan=...)` loads what the plan says (edgespec.planner.load). This module is the
public surface: `Speculator` and the names a front end imports.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Sequence
from copy import copy
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from edgespec.auto.hints import replacements
from edgespec.auto.prior import CostModel
from edgespec.auto.start import AutoSettings, Learned, start
from edgespec.engine.batch import Batch, Lane
from edgespec.engine.cache import CachedModel
from edgespec.engine.constraint import Constrained, Constraint
from edgespec.engine.drafters import (
    GRAMMAR,
    PREDICTION,
    Drafter,
    HybridDrafter,
    ModelDrafter,
    NgramDrafter,
    NoDrafter,
)
from edgespec.engine.events import DoneEvent, Event, GenerationStats, RoundEvent, TokenEvent
from edgespec.engine.generate import DraftLength, FixedK, GenerationConfig, Session
from edgespec.engine.prediction import PredictionDrafter, WithPrediction
from edgespec.engine.protocol import supports_tree
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import ConfigError
from edgespec.models import files
from edgespec.models.registry import Registry
from edgespec.options import (
    DEFAULT_K,
    DRAFTERS,
    K_MAX,
    NEEDS_DRAFT_MODEL,
    TREE_WIDTH,
    AutoSwitches,
    DrafterKind,
    DrafterSpec,
    check_k,
    check_max_tokens,
    parse_drafter,
)
from edgespec.planner.calibrate import Calibration
from edgespec.planner.load import load_models
from edgespec.planner.make import make_plan, measure_pending
from edgespec.planner.plan import DecodeOptions, DecodePlan, cost_model
from edgespec.text.conversation import Conversation
from edgespec.text.infill_prompt import Chunk, InfillEnd, InfillPrompt, build_prompt, until_filled
from edgespec.text.project_memory import ProjectMemory
from edgespec.version import __version__

if TYPE_CHECKING:
    from edgespec.doctor import Report
    from edgespec.text.grammar import Grammar

Prompt = str | Sequence[dict[str, Any]] | Sequence[int]
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
    from edgespec.llamacpp.model import library_version

    return {"edgespec": __version__, "llama_cpp_python": library_version()}


def diagnose(smoke_model: Path | None = None) -> Report:
    """Every check of `edgespec doctor` (edgespec.doctor, imported when asked: the
    commands that import this module run none of them)."""
    from edgespec.doctor import diagnose as run_checks

    return run_checks(smoke_model)


def instruction_of(prompt: Prompt) -> str:
    """A text prompt itself, a conversation's last user message; nothing in token ids."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else ""


def _text_of(events: Generator[Event, None, None]) -> str:
    parts = []
    for event in events:
        if isinstance(event, TokenEvent):
            parts.append(event.text)
        elif isinstance(event, DoneEvent):
            break
    return "".join(parts)


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
        self._cache_client: Hashable = None  # whose tokens the KV caches hold (_own_caches)
        self._model_drafter = ModelDrafter(self._draft_cache) if self._draft_cache else None
        # What `auto` learned across generations (None: no auto planned); each generation
        # starts its own drafter and policy from it (`auto/start.py`).
        self.auto_learned: Learned | None = None
        self._auto_model = False  # whether auto may draft with the draft model
        self._pass_load: Callable[[], tuple[int, int]] | None = None  # other lanes' (on_lane)
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
        target, *draft = load_models(plan.target, plan.draft, plan.resources, note)
        return cls(target, draft[0] if draft else None, plan)

    def on_lane(self, batch: Batch, seq: int) -> Speculator:
        """This pair on sequence `seq` of both models' caches (models loaded with that many
        `sequences`), its target passes decoded by `batch` with the other lanes': a server's
        slot. Drafter, policy and grammar are each generation's own, as here; what `auto`
        learns is shared; trees are off (a tree's sequences would be other lanes')."""
        lane = copy(self)
        lane.target = Lane(self.target, seq)
        lane.draft = Lane(self.draft, seq) if self.draft is not None else None
        lane.session = Session(lane.target, batch.join)
        lane.tree_width = 1
        lane._draft_cache = CachedModel(lane.draft) if lane.draft is not None else None
        lane._cache_client = None
        lane._model_drafter = ModelDrafter(lane._draft_cache) if lane._draft_cache else None
        lane._pass_load = partial(batch.others, seq)
        return lane

    def enable_auto(
        self,
        costs: CostModel,
        *,
        use_model: bool,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        memory: ProjectMemory | None = None,
    ) -> None:
        """The `auto` drafter: suffix drafts from text already seen (and the draft model when it
        may pay), with the option and K chosen every round from `costs` (in target steps);
        given the target step in seconds, the costs are then learned from the rounds that run.
        With a `memory`, suffix drafts also come from, and go to, the project's past."""
        self._auto_model = use_model and self._draft_cache is not None
        self.auto_learned = Learned.begin(
            costs,
            step_s=step_s,
            draft_tau=draft_tau,
            past=memory.load() if memory else (),
            on_done=memory.add if memory else None,
        )

    # --- drafters ----------------------------------------------------------------------

    def drafter(self, name: str | DrafterSpec) -> Drafter:
        """The drafter `name` asks for (`auto:model=0`: auto without the draft model; a new
        generation's, with no instruction's replacements)."""
        asked = parse_drafter(name)
        kind = asked.name
        if kind is DrafterKind.AUTO:
            return self._start_auto(asked.switches, None)[0]
        if kind is DrafterKind.NONE:
            return NoDrafter()
        if kind is DrafterKind.NGRAM:
            return NgramDrafter()
        if self._model_drafter is None:
            raise ConfigError(f"drafter '{kind}' needs a draft model; give --draft or a --pair")
        if kind is DrafterKind.MODEL:
            return self._model_drafter
        return HybridDrafter(NgramDrafter(), self._model_drafter)

    def strategy(
        self,
        drafter: str | DrafterSpec | Drafter,
        k: int | DraftLength | None = None,
        *,
        instruction: str = "",
        client: Hashable = None,
        tree_width: int | None = None,
    ) -> tuple[Drafter, DraftLength]:
        """A generation's drafter and its draft-length policy: for `auto`, both started afresh
        (running the features its switches leave on, the replacements `instruction` asks for,
        from `client`'s earlier texts, trees of at most `tree_width` leaves), else a fixed K."""
        asked = parse_drafter(drafter) if isinstance(drafter, str | DrafterSpec) else None
        if asked is not None and asked.name is DrafterKind.AUTO:
            switches = asked.switches
            hints = self.replacements(instruction) if switches.hints and instruction else []
            auto = self._start_auto(switches, k, hints, client, tree_width)
            return auto[0], auto[1] if isinstance(k, int | None) else k
        chosen = self.drafter(drafter) if isinstance(drafter, str | DrafterSpec) else drafter
        if not isinstance(k, int | None):
            return chosen, k
        return chosen, FixedK(DEFAULT_K.get(chosen.name, K_MAX) if k is None else k)

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

    # --- prompts -----------------------------------------------------------------------

    def prompt_tokens(
        self,
        prompt: Prompt,
        *,
        system: str | None = None,
        raw: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Text goes through the model's chat template (unless raw); messages always do, with
        the `tools` (OpenAI's definitions) the template describes to the model."""
        if isinstance(prompt, str):
            if raw:
                return list(self.target.tokenize(prompt, add_special=True, parse_special=False))
            messages = [{"role": "system", "content": system}] if system else []
            messages.append({"role": "user", "content": prompt})
            return list(self.target.apply_chat_template(messages))
        items = list(prompt)
        if items and isinstance(items[0], dict):
            if tools:
                return list(self.target.apply_chat_template(items, tools=tools))
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

    def prediction_tokens(self, prediction: str | Sequence[int]) -> list[int]:
        """A predicted output as tokens (text as the answer would hold it); a ConfigError
        naming `prediction` when it is larger than the context (no answer could repeat it)."""
        if isinstance(prediction, str):
            tokens = self._tokens(prediction)
        else:
            tokens = [int(t) for t in prediction]
        n_ctx = self.target.n_ctx
        if len(tokens) > n_ctx:
            raise ConfigError(
                f"the prediction has {len(tokens)} tokens but the context holds {n_ctx}",
                field="prediction",
            )
        return tokens

    def _predicted(self, drafter: Drafter, prediction: str | Sequence[int] | None) -> Drafter:
        """The generation's drafter with the prediction's lookups on offer too (first for a
        fixed K; after `auto`'s own, which win a tie); plain decoding (`none`) stays plain: it
        is the baseline a prediction is measured against."""
        if prediction is None or isinstance(drafter, NoDrafter):
            return drafter
        tokens = self.prediction_tokens(prediction)
        return WithPrediction(PredictionDrafter(tokens), drafter) if tokens else drafter

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
        grammar: Grammar | Constraint | None = None,
        client: Hashable = None,
        tree_width: int | None = None,
        logprobs: int | None = None,
        prediction: str | Sequence[int] | None = None,
    ) -> Generator[Event, None, None]:
        """Yield the engine's events: TokenEvent per accepted token, RoundEvent, DoneEvent.

        `drafter`: a name, with auto's switches (`"auto:hints=0:trees=0"`, or
        `DrafterSpec(DrafterKind.AUTO, AutoSwitches(hints=False))`), or a drafter object.

        `instruction`: the user's request in the prompt, whose asked-for replacements the
        `auto` drafter's copies make (`replacements`); by default a text prompt, or a
        conversation's last user message.

        `grammar`: what the output must match (a JSON schema, a GBNF grammar); every token
        is drawn from the target's distribution constrained to it, drafts or not; a grammar
        compiled already (the server's, compiled outside the worker's turn) is used as it is.

        `client`: whose earlier texts `auto` drafts from and adds to, and whose tokens the KV
        caches may hold (another client's request starts from empty caches: a server's caller);
        `tree_width`: the most leaves of `auto`'s tree drafts (None: what the target verifies);
        `logprobs`: each TokenEvent carries the target's logprob of its token and that many
        likeliest alternatives (None: none).

        `prediction`: the text the answer will mostly repeat (OpenAI's predicted outputs: the
        file being edited), text or tokens, drafted from as one more lookup (`auto` prices it
        like its own; a fixed drafter drafts it first, with its K; `none` ignores it), counted
        in the stats' `accepted_prediction_tokens` / `rejected_prediction_tokens`."""
        asked = instruction_of(prompt) if instruction is None else instruction
        chosen, policy = self.strategy(
            drafter, k, instruction=asked, client=client, tree_width=tree_width
        )
        chosen = self._predicted(chosen, prediction)
        constrained = self._constrained(grammar, drafter, chosen)
        config = GenerationConfig(
            max_tokens=max_tokens,
            stop=tuple(stop),
            sampling=sampling or SamplingParams(),
            logprobs=logprobs,
        )
        tokens = self.prompt_tokens(prompt, system=system, raw=raw)
        self._own_caches(client)
        return self.session.generate(tokens, chosen, config, policy, constrained)

    def _constrained(
        self,
        grammar: Grammar | Constraint | None,
        drafter: str | DrafterSpec | Drafter,
        chosen: Drafter,
    ) -> Constrained | None:
        """The generation's grammar, compiled where it is not yet, and whether its certain
        tokens are taken without the target."""
        if grammar is None:
            return None
        # Plain decoding asks the target for every token, the ones the grammar fixes too.
        takes = _switches(drafter).grammar and not isinstance(chosen, NoDrafter)
        from edgespec.text.grammar import Grammar  # loaded already: a grammar was made

        if isinstance(grammar, Grammar):
            grammar = grammar.compile(self.target.grammar_tokenizer)
        return Constrained(grammar, takes)

    def _own_caches(self, client: Hashable) -> None:
        """The KV caches hold one client's tokens at a time: another client's request starts
        from empty caches. Reusing whatever prefix the last request left would let a client
        time its first token to learn whether another's prompt began as it guesses (a prefix
        already cached answers many times faster)."""
        if client != self._cache_client:
            self.session.reset()
            if self._draft_cache is not None:
                self._draft_cache.reset()
            self._cache_client = client

    def generate(self, prompt: Prompt, **kwargs: Any) -> str:
        parts = []
        for event in self.stream(prompt, **kwargs):
            if isinstance(event, TokenEvent):
                parts.append(event.text)
            elif isinstance(event, DoneEvent):
                break
        return "".join(parts)

    # --- fill-in-the-middle ------------------------------------------------------------

    def infill_prompt(
        self,
        prefix: str,
        suffix: str = "",
        *,
        extra: Sequence[Chunk] = (),
        middle: str = "",
        max_tokens: int = INFILL_MAX_TOKENS,
    ) -> InfillPrompt:
        """The fill-in-the-middle prompt for the gap between `prefix` and `suffix` (with other
        files as `extra` context, and `middle`, text already typed after the prefix), laid out
        with the model's FIM tokens as llama.cpp's server lays it out, cut to fit the context;
        a ConfigError when the model has no FIM tokens (edgespec.text.infill_prompt)."""
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
        """The events of the middle's generation, which ends where an editor wants it to: at
        the end of the FIM answer (an end-of-generation token: EOS, fim_pad, file_sep), where
        it starts to repeat the suffix's first non-blank line, after `budget_s` seconds at a
        newline, at a line indented less than `n_indent`, or at `max_tokens`. The lookups
        draft from the whole prompt: prefix, suffix and extra files."""
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
        """Forget the cached conversation in both models, and what auto learned from it; a new
        conversation whose earlier texts are `history` (what a benchmark replays before a later
        turn), which auto drafts from."""
        self.session.reset()
        if self._draft_cache is not None:
            self._draft_cache.reset()
        if self.auto_learned is not None:
            self.auto_learned.forget(history=history)

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
        cal = measure_pending(self.target, self.draft, plan.calibration, plan.resources)
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
