"""A file to copy from, with one name in it twice, and drafting along an answer as the engine
does: what the suffix drafter's and the hints' tests share."""

from __future__ import annotations

from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import Drafter
from edgespec.engine.sampling import Sampler, SamplingParams

GREEDY = Sampler(SamplingParams())


def drafted(drafter: Drafter, tokens: list[int], k: int) -> list[int]:
    """What the drafter's first proposal after `tokens` (committed first) drafts at K = k."""
    drafter.commit(tokens)
    offered = drafter.offer(tokens, k)
    return list(offered[0].draft(k, GREEDY).tokens) if offered else []


def drafts_along(drafter: SuffixDrafter, prompt: list[int], out: list[int], k: int) -> list[int]:
    """Offer proposals at every step of `out` after `prompt`, as the engine does; the last
    draft."""
    drafter.begin(prompt)
    for i in range(len(out)):
        drafter.commit([*prompt, *out[:i]])
        drafter.offer([*prompt, *out[:i]], k)
    return drafted(drafter, [*prompt, *out], k)


# A file of distinct tokens in which the name 90 91 occurs twice, between 12-token stretches.
A, B, C = list(range(10, 22)), list(range(30, 42)), list(range(50, 62))
FILE = [*A, 90, 91, *B, 90, 91, *C]
