"""Proposals as drafters offer them, for tests of the policy alone."""

from __future__ import annotations

from edgespec.engine.drafters import Choice, Lookup, ModelDrafter, ModelProposal


def lookup(
    available: int,
    match: int,
    *,
    first: int = 0,
    resumed: bool = False,
    forks: tuple[int, ...] = (),
) -> Lookup:
    """A suffix lookup of `available` tokens (`first`, then the same again) found at a match
    of `match` tokens."""
    return Lookup((first,) * available, match, "suffix", resumed, forks)


def model(drafter: ModelDrafter, available: int, behind: int = 0) -> ModelProposal:
    """The draft model, `behind` tokens short of the context."""
    return ModelProposal(drafter, (), available, behind)


def drafts(choice: Choice | None) -> bool:
    """Whether a policy's choice drafts anything (K 0 and None are plain steps)."""
    return choice is not None and (choice.k > 0 or choice.width > 1)
