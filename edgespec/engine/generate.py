"""The draft-verify loop. Between rounds the target's cache holds every committed token but the
last; a round decodes [last, x_1..x_K] in one pass, keeps the accepted prefix and adds the
target's own token. K = 0 is plain decoding: the baseline and speculation share every line.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Protocol, TypeAlias

import numpy as np

from edgespec.engine import warmup
from edgespec.engine.cache import CachedModel
from edgespec.engine.constraint import (
    Constrained,
    Constraint,
    verify_constrained,
    within_grammar,
)
from edgespec.engine.drafters import GRAMMAR, Choice, Drafter, Proposal
from edgespec.engine.events import (
    DoneEvent,
    DrafterCounts,
    Event,
    GenerationStats,
    RoundEvent,
    TokenEvent,
)
from edgespec.engine.logprobs import Logprob, logprobs_of
from edgespec.engine.protocol import TargetModel, Vocab, supports_tree
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.text import StopMatcher, Utf8Stream
from edgespec.engine.tree import verify_tree
from edgespec.engine.verify import EMPTY_DRAFT, Draft, verify_greedy, verify_sampled
from edgespec.errors import ConfigError, EdgespecError
from edgespec.options import DrafterKind, check_k, check_max_tokens


def _clock() -> float:
    """A round's clock: wall time less the shapes warmed meanwhile (engine/warmup.py)."""
    return perf_counter() - warmup.spent()


@dataclass(frozen=True, kw_only=True)
class GenerationConfig:
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # Alternatives each token's logprob comes with (0: none); None: no logprobs at all.
    logprobs: int | None = None

    def __post_init__(self) -> None:
        check_max_tokens(self.max_tokens)
        if self.logprobs is not None and self.logprobs < 0:
            raise ConfigError(f"logprobs must be 0 or more, got {self.logprobs}", field="logprobs")


@dataclass(frozen=True)
class Pass:
    """A target pass a generation asks its driver for: `tokens`, the last `n_logits` rows."""

    cache: CachedModel
    tokens: list[int]
    n_logits: int
    parents: list[int] | None = None

    def run(self) -> np.ndarray:
        if self.parents is not None:
            return self.cache.decode_tree(self.tokens, self.parents)
        return self.cache.decode(self.tokens, self.n_logits)


# A generation undriven: its events, and the passes it waits on.
Steps: TypeAlias = Generator["Event | Pass", np.ndarray, None]
Driver: TypeAlias = Callable[[Steps], Generator[Event, None, None]]


def drive(steps: Steps) -> Generator[Event, None, None]:
    """A generation on its own: each pass decoded when it is asked for."""
    try:
        item = next(steps)
        while True:
            if isinstance(item, Pass):
                try:
                    rows = item.run()
                except BaseException as exc:  # raised where the pass was asked for
                    item = steps.throw(exc)
                    continue
                item = steps.send(rows)
            else:
                yield item
                item = next(steps)
    except StopIteration:
        return
    finally:
        steps.close()


class DraftLength(Protocol):
    """The policy: each round's choice (None: a plain step), then the round and its time."""

    def choose(self, proposals: Sequence[Proposal]) -> Choice | None: ...

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None: ...


class FixedK:
    """The same K every round, from the drafter's first proposal."""

    def __init__(self, k: int) -> None:
        self.k = check_k(k)

    def choose(self, proposals: Sequence[Proposal]) -> Choice | None:
        if not proposals or self.k == 0:
            return None
        return Choice(proposals[0], min(self.k, proposals[0].available))

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        pass


class _Emitter:
    """Passes accepted tokens one by one through EOG, stop strings, max_tokens and n_ctx."""

    def __init__(self, vocab: Vocab, config: GenerationConfig) -> None:
        self.vocab = vocab
        self.max_tokens = config.max_tokens
        self.utf8 = Utf8Stream()
        self.stops = StopMatcher(config.stop)
        self.generated = 0

    def push(
        self, token: int, from_draft: bool, context_full: bool, scored: Logprob | None
    ) -> tuple[TokenEvent, str | None]:
        text, reason = self._text(token, context_full)
        logprob, top = (scored.logprob, scored.top) if scored is not None else (None, ())
        event = TokenEvent(
            token=token, text=text, from_draft=from_draft, logprob=logprob, top_logprobs=top
        )
        return event, reason

    def _text(self, token: int, context_full: bool) -> tuple[str, str | None]:
        if self.vocab.is_eog(token):
            return self._flush(), "stop"
        self.generated += 1
        text, hit = self.stops.feed(self.utf8.feed(self.vocab.token_bytes(token)))
        if hit:
            return text, "stop"
        reason = (
            "length" if self.generated >= self.max_tokens else "context" if context_full else None
        )
        if reason:
            text += self._flush()
        return text, reason

    def _flush(self) -> str:
        text, hit = self.stops.feed(self.utf8.flush())
        return text if hit else text + self.stops.flush()


class Session:
    """A target model with its cached tokens, reused across generations. A lane's: `driver`
    decodes its passes with the other lanes' (a Batch's `join`), `lane` is its sequence and
    `carried(lane)` the tokens of the last pass that carried it."""

    def __init__(
        self,
        target: TargetModel,
        driver: Driver = drive,
        lane: int = 0,
        carried: Callable[[int], int] | None = None,
    ) -> None:
        self.target = target
        self._drive = driver
        self._lane = lane
        self._carried = carried
        self._cache = CachedModel(target)
        self._trees = supports_tree(target)
        self.last_stats: GenerationStats | None = None
        self._running = False

    @property
    def cached_tokens(self) -> list[int]:
        return list(self._cache.tokens)

    def reset(self) -> None:
        self._cache.reset()

    def generate(
        self,
        prompt: Sequence[int],
        drafter: Drafter,
        config: GenerationConfig | None = None,
        k: int | DraftLength = 4,
        grammar: Constrained | None = None,
    ) -> Generator[Event, None, None]:
        """TokenEvents and RoundEvents as tokens are accepted, then one DoneEvent."""
        config = config or GenerationConfig()
        n_ctx = self.target.n_ctx
        if not prompt:
            raise ConfigError("the prompt is empty")
        if len(prompt) >= n_ctx:
            raise ConfigError(
                f"the prompt has {len(prompt)} tokens but the context holds {n_ctx}; "
                "shorten the prompt or raise --ctx-size"
            )
        policy: DraftLength = FixedK(k) if isinstance(k, int) else k
        return self._drive(self._run(list(prompt), drafter, config, policy, grammar))

    def _run(
        self,
        tokens: list[int],
        drafter: Drafter,
        config: GenerationConfig,
        policy: DraftLength,
        grammar: Constrained | None,
    ) -> Steps:
        if self._running:
            raise EdgespecError(
                "another generation is still running on this model: consume it to the end or "
                "close() it before starting a new one"
            )
        self._running = True
        n_ctx = self.target.n_ctx
        sampler = Sampler(config.sampling)
        stats = GenerationStats(prompt_tokens=len(tokens), lane=self._lane)
        self.last_stats = stats
        emit = _Emitter(self.target, config)
        start = perf_counter()
        finish: str | None = None
        try:
            stats.prompt_cached = yield from self._feed_prompt(tokens)
            drafter.begin(tokens)
            stats.prompt_s = perf_counter() - start
            while finish is None:
                room = min(n_ctx - len(tokens) - 1, config.max_tokens - emit.generated - 1)
                began = _clock()
                new, round_, choice, scored = yield from self._round(
                    tokens, room, drafter, policy, sampler, grammar, config.logprobs
                )
                drafted = round_.forced + round_.accepted
                for i, tok in enumerate(new):
                    tokens.append(tok)
                    emitted = perf_counter()
                    full = len(tokens) >= n_ctx
                    event, finish = emit.push(tok, i < drafted, full, scored[i] if scored else None)
                    if not stats.ttft_s:
                        stats.ttft_s = perf_counter() - start
                    yield event
                    stats.stream_s += perf_counter() - emitted
                    if finish:
                        break
                _learn(tokens, drafter, policy, choice, round_, stats, began)
                yield round_
            stats.generated = emit.generated
            stats.total_s = perf_counter() - start
            incomplete = grammar.constraint.incomplete() if grammar is not None else None
            yield DoneEvent(finish_reason=finish, stats=stats, incomplete=incomplete)
        finally:
            stats.generated = emit.generated
            stats.total_s = stats.total_s or perf_counter() - start
            # Only committed tokens stay cached, whatever stopped the generation (EOG inside
            # an accepted run, a consumer that broke off, Ctrl-C).
            try:
                self._cache.keep(min(self._cache.reusable(tokens), len(tokens) - 1))
                drafter.commit(tokens)
                drafter.end()
            finally:
                self._running = False

    def _feed_prompt(self, tokens: list[int]) -> Generator[Pass, np.ndarray, int]:
        """Decode the prompt but its last token after the cached common prefix; its length."""
        reuse = min(self._cache.reusable(tokens), len(tokens) - 1)
        self._cache.keep(reuse)
        if tokens[reuse:-1]:
            yield Pass(self._cache, tokens[reuse:-1], 0)
        return reuse

    def _round(
        self,
        tokens: list[int],
        room: int,
        drafter: Drafter,
        policy: DraftLength,
        sampler: Sampler,
        grammar: Constrained | None,
        top: int | None,
    ) -> Generator[
        Pass, np.ndarray, tuple[list[int], RoundEvent, Choice | None, list[Logprob] | None]
    ]:
        """Draft and verify in one pass; the tokens a grammar alone allows come first in it,
        unverified. The new tokens, the event, the policy's choice, logprobs with `top`."""
        t0 = _clock()
        constraint = grammar.constraint if grammar is not None else None
        forced = []
        if grammar is not None and grammar.takes_certain:
            forced = grammar.constraint.take_certain(room + 1)
        grammar_s = _clock() - t0 if grammar is not None else 0.0
        if forced and (len(forced) > room or self.target.is_eog(forced[-1])):
            return (yield from self._forced_end(tokens, forced, top, t0, grammar_s))
        context, room = ([*tokens, *forced] if forced else tokens), room - len(forced)
        choice = policy.choose(drafter.offer(context, room)) if room > 0 else None
        k = max(0, min(choice.k, room)) if choice is not None else 0
        if choice is not None and choice.width > 1 and self._trees and grammar is None:
            new, event, scored = yield from self._tree_round(
                tokens, room, choice, k, drafter, sampler, t0, top
            )
            return new, event, choice, scored
        draft, cut_s = self._draft(choice, k, sampler, constraint)
        grammar_s += cut_s
        t1 = _clock()
        n_rows = len(draft) + 1 + (len(forced) if top is not None else 0)
        asked = [tokens[-1], *forced, *draft.tokens]
        read = yield Pass(self._cache, asked, n_rows)
        t2 = _clock()
        n_acc, nxt = _verified(draft, read[n_rows - len(draft) - 1 :], sampler, constraint)
        new = [*forced, *draft.tokens[:n_acc], nxt]
        scored = None if top is None else logprobs_of(read, new, top)
        self._cache.keep(len(context) + n_acc)
        t3 = _clock()
        event = RoundEvent(
            drafter=draft.source if draft.tokens else DrafterKind.NONE,
            k=k,
            drafted=len(draft),
            accepted=n_acc,
            draft_s=t1 - t0,
            verify_s=t3 - t1,
            target_token=nxt,
            confidence=draft.confidence,
            forced=len(forced),
            drafting_s=t1 - t0 - grammar_s,
            sample_s=t3 - t2 if constraint is None else 0.0,
            grammar_s=grammar_s + (t3 - t2 if constraint is not None else 0.0),
            pass_tokens=self._pass_tokens(len(asked)),
            pass_s=t2 - t1,
        )
        return new, event, choice, scored

    def _pass_tokens(self, own: int) -> int:
        return self._carried(self._lane) if self._carried is not None else own

    def _draft(
        self, choice: Choice | None, k: int, sampler: Sampler, constraint: Constraint | None
    ) -> tuple[Draft, float]:
        draft = EMPTY_DRAFT
        if choice is not None and k:
            draft = choice.proposal.draft(k, sampler, choice.stop)
        draft = draft.within(self.target.n_vocab).through_end(self.target.is_eog)
        if constraint is None:
            return draft, 0.0
        cut = _clock()
        return within_grammar(draft, constraint), _clock() - cut

    def _forced_end(
        self, tokens: list[int], forced: list[int], top: int | None, t0: float, grammar_s: float
    ) -> Generator[Pass, np.ndarray, tuple[list[int], RoundEvent, None, list[Logprob] | None]]:
        """Forced tokens that end the generation, unverified (logprobs: a pass of their own)."""
        seconds, n = _clock() - t0, len(forced)
        scored = None
        if top is not None:
            rows = yield Pass(self._cache, [tokens[-1], *forced[:-1]], n)
            scored = logprobs_of(rows, forced, top)
        event = RoundEvent(
            drafter=GRAMMAR,
            k=0,
            drafted=0,
            accepted=0,
            draft_s=seconds,
            forced=n,
            grammar_s=grammar_s,
        )
        return forced, event, None, scored

    def _tree_round(
        self,
        tokens: list[int],
        room: int,
        choice: Choice,
        k: int,
        drafter: Drafter,
        sampler: Sampler,
        t0: float,
        top: int | None,
    ) -> Generator[Pass, np.ndarray, tuple[list[int], RoundEvent, list[Logprob] | None]]:
        """One pass over a tree of candidates; the accepted path stays in the cache."""
        # A tree's nodes all sit in the cache for the pass.
        space = self.target.n_ctx - len(tokens)
        nodes = min(choice.nodes, space)
        tree = choice.proposal.tree(k, nodes, choice.width, room, choice.stop, sampler)
        tree = tree.within(self.target.n_vocab).through_end(self.target.is_eog)
        t1 = _clock()
        logits = yield Pass(self._cache, [tokens[-1], *tree.tokens], 0, tree.batch_parents())
        t2 = _clock()
        carried = self._pass_tokens(len(tree) + 1)
        path, nxt, outcome = verify_tree(tree, logits, sampler)
        accepted = [tree.tokens[n] for n in path]
        new = [*accepted, nxt]
        # Row 0 and the accepted nodes' rows: each predicts the next token of the path.
        rows = [0, *(n + 1 for n in path)]
        scored = None if top is None else logprobs_of(logits[rows], new, top)
        self._cache.keep_path(rows, [tokens[-1], *accepted])
        t3 = _clock()
        event = RoundEvent(
            drafter=tree.source,
            k=k,
            drafted=len(tree),
            accepted=len(path),
            draft_s=t1 - t0,
            verify_s=t3 - t1,
            drafting_s=t1 - t0,
            sample_s=t3 - t2,
            tree=outcome,
            target_token=nxt,
            confidence=tree.confidence,
            pass_tokens=carried,
            pass_s=t2 - t1,
        )
        return new, event, scored


def _verified(
    draft: Draft, logits: np.ndarray, sampler: Sampler, constraint: Constraint | None
) -> tuple[int, int]:
    if constraint is not None:
        return verify_constrained(draft, logits, sampler, constraint)
    if sampler.greedy:
        return verify_greedy(draft.tokens, logits)
    return verify_sampled(draft, lambda i: sampler.dist(logits[i]), sampler)


def _learn(
    tokens: list[int],
    drafter: Drafter,
    policy: DraftLength,
    choice: Choice | None,
    round_: RoundEvent,
    stats: GenerationStats,
    began: float,
) -> None:
    """After a round's tokens are out: the drafters and the policy learn from it."""
    after = perf_counter()
    drafter.commit(tokens)  # the context itself: a copy a round grows with the conversation
    _count(stats, round_)
    policy.observe(choice, round_, _clock() - began)
    stats.drafting_s += perf_counter() - after


def _count(stats: GenerationStats, round_: RoundEvent) -> None:
    if round_.forced:
        forced = stats.by_drafter.setdefault(GRAMMAR, DrafterCounts())
        forced.rounds += 1
        forced.drafted += round_.forced
        forced.accepted += round_.forced
        stats.drafted += round_.forced
        stats.accepted += round_.forced
    stats.rounds += 1
    stats.k_chosen += round_.k
    stats.pass_tokens += round_.pass_tokens
    stats.pass_s += round_.pass_s
    stats.drafted += round_.drafted
    stats.accepted += round_.accepted
    stats.draft_s += round_.draft_s
    stats.verify_s += round_.verify_s
    stats.drafting_s += round_.drafting_s
    stats.sample_s += round_.sample_s
    stats.grammar_s += round_.grammar_s
    counts = stats.by_drafter.setdefault(round_.drafter, DrafterCounts())
    counts.rounds += 1
    counts.drafted += round_.drafted
    counts.accepted += round_.accepted
