"""A lane past its first tokens yields to one in its first (issue 66): its K falls to what costs
that lane's pass at most `yield_delay` more than a plain step, and rises again when that lane
is past them or gone; alone, or beside lanes as old as itself, it chooses as before. Greedy
texts are the same whatever K each lane chose."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from edgespec.api import Speculator
from edgespec.auto.config import AUTO
from edgespec.auto.costs import LearnedCosts, Load
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.engine.drafters import DraftKind, Lookup, ModelProposal
from edgespec.engine.events import Event, RoundEvent, TokenEvent
from tests.fakes import FakeTextModel

# Passes nearly flat, as on a GPU: a long lookup costs little more than a plain step.
FLAT = CostModel({n: 1.0 + 0.03 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16, 32)}, 0.1, 0.1)
# A CPU's: a pass costs about what its tokens cost.
CPU = CostModel({1: 1.0, 2: 1.67, 4: 2.57, 8: 4.5, 16: 10.7, 32: 18.7}, 0.3)
COPY = Lookup(tuple(range(32)), 8, "suffix")
YOUNG, OLD = 3, AUTO.policy.young_tokens  # tokens a lane has answered
DELAY = AUTO.policy.yield_delay


class Others:
    """The other lanes of a pass, as `Batch.others` reports them; the test changes them."""

    def __init__(self, tokens: int = 0, seqs: int = 0, youngest: int = 0) -> None:
        self.now = (tokens, seqs, youngest)

    def __call__(self) -> tuple[int, int, int]:
        return self.now


def _policy(others: Others, answered: int = OLD) -> AdaptiveDraftLength:
    """A policy over fixed costs whose lane has answered `answered` tokens (plain rounds)."""
    policy = AdaptiveDraftLength(LearnedCosts(FLAT, 0.03, learn=False), load=others)
    plain = RoundEvent(drafter="none", k=0, drafted=0, accepted=0)
    for _ in range(answered):
        policy.observe(None, plain, 0.03)
    return policy


def _bound(costs: LearnedCosts, kind: DraftKind, load: Load) -> int:
    """The rule's bound, written out: the longest K whose round costs the pass at most
    `yield_delay` more than a plain step."""
    allowed = (1.0 + DELAY) * costs.plain_s(load)
    ks = [k for k in costs.prior.choices(32) if costs.round_s(kind, k, load=load) <= allowed]
    return max(ks, default=0)


def test_a_lane_beside_a_young_one_drafts_what_the_bound_allows_then_all_again() -> None:
    others = Others(1, 1, YOUNG)
    policy = _policy(others)
    costs, load = policy.costs, Load(1, 1)
    bound = _bound(costs, DraftKind.LOOKUP, load)
    beside = policy.choose([COPY])
    assert beside is not None and beside.k == bound > 0
    assert beside.predicted_s <= (1.0 + DELAY) * costs.plain_s(load)
    others.now = (1, 1, OLD)  # past its first tokens
    after = policy.choose([COPY])
    assert after is not None and after.k > bound  # the case the rule is for
    others.now = (0, 0, 0)  # gone
    alone = policy.choose([COPY])
    assert alone is not None and alone.k == _policy(Others()).choose([COPY]).k  # type: ignore[union-attr]


def test_a_draft_model_chain_is_bounded_and_its_stop_rule_prices_the_shared_pass() -> None:
    """The chain's K is what the stop rule may draft up to; its prices are `model_round_s` at
    the pass's load (the others' tokens in it), as the choice's prediction is."""
    others = Others(3, 1, YOUNG)
    policy = _policy(others)
    costs, load = policy.costs, Load(3, 1)
    model = ModelProposal(None, (), 32, 0)  # type: ignore[arg-type]
    beside = policy.choose([model])
    bound = _bound(costs, DraftKind.MODEL, load)
    if bound == 0:
        assert beside is None
    else:
        assert beside is not None and beside.k == bound
    others.now = (3, 1, OLD)
    after = policy.choose([model])
    assert after is not None and after.k == 32 and after.stop is not None
    prices = after.stop.args[2]  # type: ignore[attr-defined]
    assert prices.upto(5) == [costs.model_round_s(n, load) for n in range(6)]


@pytest.mark.parametrize(("mine", "theirs"), [(YOUNG, YOUNG), (YOUNG, OLD), (OLD, OLD)])
def test_no_lane_yields_to_one_no_younger_than_its_first_tokens(mine: int, theirs: int) -> None:
    """Two young lanes, or two old ones, are equals; a young lane never yields to an old one:
    each prices the shared pass as before."""
    policy = _policy(Others(1, 1, theirs), answered=mine)
    chosen = policy.choose([COPY])
    unyielding = _policy(Others(1, 1, theirs), answered=0).choose([COPY])
    assert chosen is not None and unyielding is not None and chosen.k == unyielding.k
    assert chosen.k > _bound(policy.costs, DraftKind.LOOKUP, Load(1, 1))


# --- two lanes on fake models: the long answer yields while the short one runs ----------------


def _spec(sequences: int, costs: CostModel = FLAT) -> Speculator:
    target = FakeTextModel(seed=1, n_ctx=512, sequences=sequences)
    draft = FakeTextModel(seed=1, n_ctx=512, noise=1.0, noise_seed=5, sequences=sequences)
    spec = Speculator(target, draft)
    spec.enable_auto(costs, use_model=True)  # costs fixed: the same choices every run
    return spec


LONG, SHORT = "abcabcabcabd abcabcabcabd abcabc", "dcba dcba dcbadcbadc"


def _tokens(events: list[Event]) -> list[int]:
    return [e.token for e in events if isinstance(e, TokenEvent)]


def _read(stream: Iterator[Event], out: list[Event], tokens: int) -> None:
    """Read `stream` into `out` until it holds `tokens` tokens (or the stream ends)."""
    while len(_tokens(out)) < tokens:
        event = next(stream, None)
        if event is None:
            return
        out.append(event)


@pytest.mark.parametrize("drafter", ["auto", "none"])
def test_beside_a_short_request_a_long_answer_yields_and_both_texts_are_their_idle_ones(
    drafter: str,
) -> None:
    alone = [_tokens(list(_spec(1).stream(p, drafter=drafter, max_tokens=n))) for p, n in
             ((LONG, 200), (SHORT, 16))]  # fmt: skip
    spec = _spec(2)
    long_lane, short_lane = spec.lanes(2)
    batch = long_lane.batch
    assert batch is not None
    long_events: list[Event] = []
    chat = long_lane.stream(LONG, drafter=drafter, max_tokens=200)
    _read(chat, long_events, OLD + 8)  # past its first tokens
    short = short_lane.stream(SHORT, drafter=drafter, max_tokens=16)
    # Reading one answer has every step run, the other's rounds too (its events wait).
    beside: list[RoundEvent] = []
    while batch.active == 2:
        long_events.append(next(chat))
        if isinstance(long_events[-1], RoundEvent) and batch.active == 2:
            beside.append(long_events[-1])
    # Chosen before the short one came: the round whose tokens were being read, and the next
    # (its draft made, its pass asked for).
    beside = beside[2:]
    short_events = list(short)
    after = len(long_events)
    long_events += list(chat)
    assert [_tokens(long_events), _tokens(short_events)] == alone
    if drafter == "none":
        return
    costs = spec.auto_learned.costs  # type: ignore[union-attr]
    # While the short one ran: no round longer than the bound at its pass's load (the short
    # lane's tokens in it: at least its one; a lookup's bound, the larger of the two).
    ceiling = max(_bound(costs, DraftKind.LOOKUP, Load(n, 1)) for n in range(1, 18))
    assert beside and max(e.k for e in beside) <= ceiling
    alone_again = [e.k for e in long_events[after:] if isinstance(e, RoundEvent)][1:]
    assert max(alone_again) > ceiling  # alone again, it drafts as long as it pays


# --- a new request's prompt, read a chunk a step beside the others' rounds --------------------


def test_a_prompt_chunk_adds_at_most_its_steps_to_the_shared_pass() -> None:
    steps = AUTO.costs.prompt_steps
    for model in (CPU, FLAT):
        costs = LearnedCosts(model, 0.05)
        for others in (0, 1, 2, 9, 33):
            n = costs.prompt_chunk(others)
            base = costs.verify_s(others) if others else 0.0
            added = costs.verify_s(n, Load(others)) - base
            assert added <= steps * costs.verify_s(1) + 1e-12
            more = costs.verify_s(n + 1, Load(others)) - base
            assert n == AUTO.costs.prompt_most or more > steps * costs.verify_s(1)
    # Where a pass costs what its tokens cost, about PROMPT_CHUNK's 32; where it is flat, all.
    assert 28 <= LearnedCosts(CPU, 0.05).prompt_chunk(1) <= 34
    assert LearnedCosts(FLAT, 0.05).prompt_chunk(1) == AUTO.costs.prompt_most


def test_lanes_read_a_new_prompt_in_chunks_priced_at_the_learned_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec(2, CPU)
    long_lane, short_lane = spec.lanes(2)
    assert long_lane.batch is not None
    costs = spec.auto_learned.costs  # type: ignore[union-attr]
    assert long_lane.batch.chunk(3) == costs.prompt_chunk(3)
    sizes: list[dict[int, int]] = []  # each batch's tokens, by sequence
    decode_batch = spec.target.decode_batch

    def recorded(requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        sizes.append({seq: len(tokens) for seq, tokens, _ in requests})
        return decode_batch(requests)

    monkeypatch.setattr(spec.target, "decode_batch", recorded)
    chat = long_lane.stream(LONG, drafter="none", max_tokens=200)
    next(chat)
    prompt = "ab " * 100
    alone = _tokens(list(_spec(1, CPU).stream(prompt, drafter="none", max_tokens=4)))
    assert _tokens(list(short_lane.stream(prompt, drafter="none", max_tokens=4))) == alone
    chunk = costs.prompt_chunk(1)  # beside the long answer's plain steps
    read = [s[1] for s in sizes if 1 in s and 0 in s]
    assert len(spec.prompt_tokens(prompt)) - 1 > 2 * chunk
    assert read[:2] == [chunk, chunk]
    chat.close()


def test_each_round_reports_its_pass_and_the_answer_its_lane_k_and_waits() -> None:
    """What the server logs per lane: the K chosen, the pass's tokens (every lane's) and the
    wait for it, summed in the answer's stats."""
    alone = [e for e in _spec(1).stream(LONG, drafter="auto", max_tokens=40)]
    rounds = [e for e in alone if isinstance(e, RoundEvent)]
    assert all(e.pass_tokens == 1 + e.drafted and e.pass_s > 0 for e in rounds)
    stats = alone[-1].stats  # type: ignore[union-attr]
    assert stats.lane == 0 and stats.k_chosen == sum(e.k for e in rounds)
    assert stats.mean_pass_tokens == pytest.approx(sum(1 + e.drafted for e in rounds) / len(rounds))
    spec = _spec(2)
    long_lane, short_lane = spec.lanes(2)
    streams = [
        long_lane.stream(LONG, drafter="none", max_tokens=30),
        short_lane.stream(SHORT, drafter="none", max_tokens=30),
    ]
    both: list[list[Event]] = [[], []]
    live = [0, 1]
    while live:  # one event from each in turn
        for i in list(live):
            event = next(streams[i], None)
            if event is None:
                live.remove(i)
            else:
                both[i].append(event)
    for lane, events in enumerate(both):
        shared = [e.pass_tokens for e in events if isinstance(e, RoundEvent)]
        assert shared[:20] == [2] * 20  # its token and the other lane's
        done = events[-1].stats  # type: ignore[union-attr]
        assert done.lane == lane and done.mean_k == 0 and done.wait_per_pass_s > 0
        assert done.as_dict()["mean_pass_tokens"] == pytest.approx(sum(shared) / len(shared), 1e-3)


@pytest.mark.real
def test_real_pair_a_short_request_beside_a_long_answer_both_greedy_as_alone(real_pair) -> None:  # type: ignore[no-untyped-def]
    """`auto` in both lanes of the default pair: the long answer past its first tokens when the
    short one comes, both texts their idle ones (or parting at a near tie of the target's two
    best tokens, where a batch's kernels may round otherwise)."""
    from edgespec.bench.runner import near_tie
    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    options = LoadOptions(n_ctx=1024, sequences=2)
    target, draft = LlamaModel(real_pair.target, options), LlamaModel(real_pair.draft, options)
    try:
        spec = Speculator(target, draft)
        spec.enable_auto(CPU, use_model=True, step_s=0.05)
        asked = [("Explain how a CPU cache works, step by step.", 160), ("Name 3 colours.", 16)]
        alone = [_tokens(list(spec.stream(p, max_tokens=n))) for p, n in asked]
        spec.empty_caches()
        long_lane, short_lane = spec.lanes(2)
        long_events: list[Event] = []
        chat = long_lane.stream(asked[0][0], max_tokens=asked[0][1])
        _read(chat, long_events, OLD + 8)
        short = _tokens(list(short_lane.stream(asked[1][0], max_tokens=asked[1][1])))
        long_events += list(chat)
        together = [_tokens(long_events), short]
        for (prompt, _), base, other in zip(asked, alone, together, strict=True):
            if base == other:
                continue
            i = next(j for j, (x, y) in enumerate(zip(base, other, strict=False)) if x != y)
            spec.empty_caches()
            logits = target.decode([*spec.prompt_tokens(prompt), *base[:i]], 1)[0]
            assert near_tie(logits, base[i], other[i])[1], (prompt, i)
    finally:
        target.close()
        draft.close()
