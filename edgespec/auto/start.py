"""`auto` started per generation: fresh drafter and policy from one request's settings, with
what earlier generations taught passed in.

A generation's objects are built once and never reconfigured, so generations that run at once
share nothing a request sets; what they share is what is learned across them (`Learned`): the
round costs (the device's), the acceptance rates (the conversation's) and the suffix memory
(each client's earlier texts and the persistent memory).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from edgespec.auto.costs import LearnedCosts
from edgespec.auto.index import SuffixMemory
from edgespec.auto.learning import AdaptiveState, fresh_state
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import EitherDrafter, ModelDrafter
from edgespec.options import ALL_ON, K_MAX, AutoSwitches

Replacement = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, kw_only=True)
class AutoSettings:
    """What one generation of `auto` may do: K up to `k_max` (the user's -k), trees of up to
    `tree_width` leaves (1: chains only), and the switches (`AutoSwitches`): long lookups held
    back in a new text (`ramp`) until a copy of `copy_proof` tokens or of one was accepted
    (`proof`), within what the rounds gained (`budget`); copies that take their source up again
    (`resume`) and make again the output's edits (`learn_edits`) and the `hints` (the
    replacements the request names, as tokens); the draft model on offer (`model`)."""

    k_max: int = K_MAX
    tree_width: int = 1
    switches: AutoSwitches = ALL_ON
    hints: tuple[Replacement, ...] = ()


@dataclass(kw_only=True)
class Learned:
    """What `auto` learns across generations, owned by whoever runs them (a `Speculator`)."""

    costs: LearnedCosts
    memory: SuffixMemory
    state: AdaptiveState

    @classmethod
    def begin(
        cls,
        costs: CostModel,
        *,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        past: Sequence[Sequence[int]] = (),
        on_done: Callable[[list[int]], None] | None = None,
    ) -> Learned:
        """Nothing learned yet: the calibration's `costs` (in target steps), learned from the
        rounds that run given the target step in seconds, and the persistent memory's texts."""
        learned = LearnedCosts(costs, step_s or 1.0, draft_tau, learn=step_s is not None)
        memory = SuffixMemory(past=past, on_done=on_done)
        return cls(costs=learned, memory=memory, state=fresh_state())

    def forget(self, client: Hashable = None, history: Sequence[Sequence[int]] = ()) -> None:
        """A new conversation: the prior acceptance rates, and `client`'s earlier texts back
        to the persistent memory's plus `history`. What the rounds taught about costs stays:
        it belongs to the device, not to the text."""
        self.state = fresh_state()
        self.memory.forget(client, history)


def start(
    settings: AutoSettings,
    learned: Learned,
    client: Hashable = None,
    model: ModelDrafter | None = None,
    load: Callable[[], tuple[int, int]] | None = None,
) -> tuple[EitherDrafter, AdaptiveDraftLength]:
    """One generation's drafter (lookups from `client`'s texts, and the `model` drafter where
    the settings leave it on) and policy; `load`: the tokens of other sequences its passes
    carry and how many those are (a server's slots)."""
    suffix = SuffixDrafter(
        switches=settings.switches,
        memory=learned.memory,
        client=client,
        hints=settings.hints,
    )
    policy = AdaptiveDraftLength(
        learned.costs,
        k_max=settings.k_max,
        tree_width=settings.tree_width,
        switches=settings.switches,
        state=learned.state,
        load=load,
    )
    return EitherDrafter(suffix, model if settings.switches.model else None), policy
