"""`auto` started per generation, never reconfigured: generations running at once share only
what is learned across them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from edgespec.auto.costs import LearnedCosts
from edgespec.auto.index import Keep, Recall, SuffixMemory
from edgespec.auto.learning import AdaptiveState, fresh_state
from edgespec.auto.policy import AdaptiveDraftLength, Sharing
from edgespec.auto.prior import CostModel
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import EitherDrafter, ModelDrafter
from edgespec.options import ALL_ON, K_MAX, AutoSwitches

Replacement = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, kw_only=True)
class AutoSettings:
    """One generation's limits, its switches and the replacements its request names."""

    k_max: int = K_MAX
    tree_width: int = 1
    switches: AutoSwitches = ALL_ON
    hints: tuple[Replacement, ...] = ()


@dataclass(kw_only=True)
class Learned:
    """What `auto` learns across generations: the device's costs, and each client's rates and
    texts, kept apart (a rate learned from one client's text would tell another of it)."""

    costs: LearnedCosts
    memory: SuffixMemory
    state: AdaptiveState  # the rates of the client None (a CLI's, a library's)
    states: OrderedDict[Hashable, AdaptiveState] = field(default_factory=OrderedDict)

    @classmethod
    def begin(
        cls,
        costs: CostModel,
        *,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        past: Sequence[Sequence[int]] = (),
        on_done: Keep | None = None,
        recall: Recall | None = None,
    ) -> Learned:
        """Nothing learned yet: `costs` in target steps, learned only given `step_s` (seconds)."""
        learned = LearnedCosts(costs, step_s or 1.0, draft_tau, learn=step_s is not None)
        memory = SuffixMemory(past=past, on_done=on_done, recall=recall)
        return cls(costs=learned, memory=memory, state=fresh_state())

    def state_of(self, client: Hashable) -> AdaptiveState:
        """`client`'s rates (a new client's the prior ones); the last `clients` clients' kept."""
        if client is None:
            return self.state
        state = self.states.pop(client, None) or fresh_state()
        self.states[client] = state
        while len(self.states) > self.memory.config.clients:
            self.states.popitem(last=False)
        return state

    def forget(self, history: Sequence[Sequence[int]] = ()) -> None:
        """A new conversation (the client None's): prior rates, the texts back to the memory's
        plus `history`; the costs stay (they are the device's)."""
        self.state = fresh_state()
        self.memory.forget(history)


def start(
    settings: AutoSettings,
    learned: Learned,
    client: Hashable = None,
    model: ModelDrafter | None = None,
    load: Sharing | None = None,
) -> tuple[EitherDrafter, AdaptiveDraftLength]:
    """One generation's drafter and policy; `load`: the other sequences in its passes."""
    switches = settings.switches
    suffix = SuffixDrafter(
        switches=switches, memory=learned.memory, client=client, hints=settings.hints
    )
    policy = AdaptiveDraftLength(
        learned.costs,
        k_max=settings.k_max,
        tree_width=settings.tree_width,
        switches=switches,
        state=learned.state_of(client),
        load=load,
    )
    return EitherDrafter(suffix, model if switches.model else None), policy
