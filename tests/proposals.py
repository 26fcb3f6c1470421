"""Proposals as drafters offer them, for tests of the policy alone."""

from __future__ import annotations

from edgespec.engine.drafters import Lookup, ModelDrafter, ModelProposal


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
