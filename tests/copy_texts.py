"""A file to copy from, with one name in it twice, and drafting along an answer as the engine
does: what the suffix drafter's and the hints' tests share."""

from __future__ import annotations

from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.suffix import SuffixDrafter

GREEDY = Sampler(SamplingParams())


def drafts_along(drafter: SuffixDrafter, prompt: list[int], out: list[int], k: int) -> list[int]:
    """Offer options at every step of `out` after `prompt`, as the engine does; the last draft."""
    drafter.begin(prompt)
    for i in range(len(out)):
        drafter.options([*prompt, *out[:i]], k)
    return list(drafter.propose([*prompt, *out], k, GREEDY).tokens)


# A file of distinct tokens in which the name 90 91 occurs twice, between 12-token stretches.
A, B, C = list(range(10, 22)), list(range(30, 42)), list(range(50, 62))
FILE = [*A, 90, 91, *B, 90, 91, *C]
