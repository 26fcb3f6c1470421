"""`auto`'s bookkeeping per round is bounded: the draft model's stop rule prices a round's
lengths once per round, with the same numbers as one by one, and the context is compared, not
copied, where it only grows."""

from __future__ import annotations

import random

from edgespec.auto.costs import ALONE, LearnedCosts, Load
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.engine.cache import CachedModel, common_prefix
from edgespec.engine.drafters import DraftKind, ModelDrafter
from edgespec.engine.events import RoundEvent
from tests.fakes import FakeModel
from tests.machines import GPU_TAU


def learned_costs() -> LearnedCosts:
    """Costs that learned from model rounds of several lengths and verification ratios that
    differ by n (some n seen, some not)."""
    costs = LearnedCosts(CostModel(GPU_TAU, 0.2, 0.01), 0.005, {1: 1.0, 2: 1.7, 8: 5.0})
    rng = random.Random(3)
    for i in range(60):
        drafted = rng.choice((1, 2, 3, 5, 8))
        event = RoundEvent(
            drafter="model",
            k=drafted,
            drafted=drafted,
            accepted=rng.randint(0, drafted),
            draft_s=0.001 * drafted * rng.uniform(0.8, 1.3) + 0.002,
            verify_s=0.005 * (1.0 + 0.03 * drafted) * rng.uniform(0.9, 1.4),
        )
        costs.observe(event, DraftKind.MODEL, 0.012 + 0.001 * (i % 5))
    return costs


def test_a_rounds_prices_are_model_round_s_exactly() -> None:
    """Alone and in a pass that others share (the stop rule and `model_round_s` price a round
    at the pass's total size alike): some of those totals learned, some not."""
    for costs in (learned_costs(), LearnedCosts(CostModel(GPU_TAU, 0.3), 0.01)):
        for load in (ALONE, Load(1, 1), Load(7, 2)):
            for last in (0, 1, 7, 39):
                expected = [costs.model_round_s(n, load) for n in range(last + 1)]
                assert costs.model_round_prices(last, load) == expected


def test_the_stop_rule_prices_a_round_once_not_at_every_draft_step() -> None:
    policy = AdaptiveDraftLength(learned_costs(), k_max=32)
    priced: list[int] = []
    table = policy.costs.model_round_prices

    def count(last: int, load: Load = ALONE) -> list[float]:
        priced.append(last)
        return table(last, load)

    policy.costs.model_round_prices = count  # type: ignore[method-assign]
    stop = policy.stop_rule(32, 1.0 / policy.costs.plain_s())
    chances: list[float] = []
    for drafted in range(12):  # a sure draft, then an unsure one: every length weighed
        chances.append((chances[-1] if chances else 1.0) * (0.99 if drafted < 8 else 0.3))
        stop(drafted, chances)
    assert priced == [32]  # every length up to K, once


def test_common_prefix_of_lists_tuples_and_mixed() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        a = [rng.randint(0, 3) for _ in range(rng.randint(0, 200))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 90))]
        pairs = enumerate(zip(a, b, strict=False))
        expected = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
        for x, y in ((a, b), (tuple(a), b), (b, tuple(a)), (tuple(b), tuple(a))):
            assert common_prefix(x, y) == expected


class Seen(list):  # type: ignore[type-arg]
    """A context that records the slices taken of it (what a comparison reads)."""

    def __init__(self, items: list[int]) -> None:
        super().__init__(items)
        self.slices: list[int] = []

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        if isinstance(key, slice):
            self.slices.append(len(range(*key.indices(len(self)))))
        return super().__getitem__(key)


def test_a_growing_context_is_compared_from_where_it_last_agreed_with_the_mirror() -> None:
    rng = random.Random(8)
    model = FakeModel(n_vocab=16, n_ctx=8192)
    cache = CachedModel(model)
    context = Seen([rng.randint(0, 15) for _ in range(3000)])
    cache.sync(context)
    for _ in range(40):  # rounds as a draft model's: read the context, draft, be cut back
        cache.sync(context, cache.shared(context))
        draft = [rng.randint(0, 15) for _ in range(rng.randint(1, 5))]
        cache.decode(draft, 1)
        kept = rng.randint(0, len(draft))
        context.extend([*draft[:kept], rng.randint(0, 15)])
        context.slices.clear()
        assert cache.shared(context) == common_prefix(cache.tokens, list(context))
        assert max(context.slices, default=0) <= 8  # the round's tokens, not the 3,000
        cache.keep(cache.shared(context))
    # The same list changed in place where they last agreed, or another list: compared anew.
    agreed = cache.shared(context)
    context[agreed - 1] = (context[agreed - 1] + 1) % 16
    assert cache.shared(context) == agreed - 1
    other = list(context)
    assert cache.shared(other) == common_prefix(cache.tokens, other)


def test_an_idle_draft_model_reads_only_a_rounds_new_ids() -> None:
    # While lookups win, the draft model reads nothing and its unread part grows: each round's
    # offer checks the new tokens' ids against its vocabulary, not the whole unread part again.
    rng = random.Random(9)
    drafter = ModelDrafter(FakeModel(n_vocab=16, n_ctx=8192))
    context = Seen([rng.randint(0, 15) for _ in range(3000)])
    assert drafter.offer(context, 4)
    for _ in range(20):
        context.extend(rng.randint(0, 15) for _ in range(rng.randint(1, 6)))
        context.slices.clear()
        (proposal,) = drafter.offer(context, 4)
        assert proposal.behind == len(context)
        assert max(context.slices, default=0) <= 6
    context.append(16)  # an id the draft does not have: nothing to offer, then or later
    assert drafter.offer(context, 4) == []
    context.append(3)
    assert drafter.offer(context, 4) == []
