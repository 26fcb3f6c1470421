"""Several generations in one loaded pair: each on its own sequence of both caches, with its own
drafter, policy, grammar and sampler, their target passes decoded together one batch a step."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterator, Sequence

import numpy as np
import pytest

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.engine import generate as generate_module
from edgespec.engine.batch import Batch, FairLock, Lane
from edgespec.engine.cache import CachedModel
from edgespec.engine.drafters import ModelDrafter, NgramDrafter, Proposal
from edgespec.engine.events import DoneEvent, Event, RoundEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.sampling import SamplingParams
from edgespec.errors import EdgespecError
from tests.fakes import FakeModel, FakeTextModel
from tests.stats import FAIL_P, PASS_P, PROMPT, SEQ_PARAMS, STEPS, chi2_pvalue, exact_sequence_probs
from tests.test_distribution import accept_without_coin

FLAT = CostModel({n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16, 32)}, 0.1)
PROMPTS = ("abcabcabcabd abcabcabcabd abcabc", "dcba dcba dcbadcbadc", "hello world hello")


def _spec(sequences: int) -> Speculator:
    target = FakeTextModel(seed=1, n_ctx=256, sequences=sequences)
    draft = FakeTextModel(seed=1, n_ctx=256, noise=1.0, noise_seed=5, sequences=sequences)
    spec = Speculator(target, draft)
    spec.enable_auto(FLAT, use_model=True, step_s=0.01)
    return spec


def _batch(lanes: Sequence[Speculator]) -> Batch:
    """The batch that decodes the lanes' passes."""
    assert lanes[0].batch is not None
    return lanes[0].batch


def _interleaved(streams: Sequence[Iterator[Event]]) -> list[list[Event]]:
    """Every stream's events, read one from each in turn (as concurrent readers would)."""
    out: list[list[Event]] = [[] for _ in streams]
    live = set(range(len(streams)))
    while live:
        for i in sorted(live):
            event = next(streams[i], None)
            if event is None:
                live.discard(i)
            else:
                out[i].append(event)
    return out


def _tokens(events: Sequence[Event]) -> list[int]:
    return [e.token for e in events if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("drafter", ["none", "model", "ngram", "hybrid", "auto"])
def test_greedy_generations_batched_give_what_each_gives_alone(drafter: str) -> None:
    alone = []
    for prompt in PROMPTS:
        spec = _spec(1)
        alone.append(_tokens(list(spec.stream(prompt, drafter=drafter, max_tokens=60))))
    spec = _spec(len(PROMPTS))
    lanes = spec.lanes(len(PROMPTS))
    batch = _batch(lanes)
    streams = [
        lane.stream(p, drafter=drafter, max_tokens=60)
        for lane, p in zip(lanes, PROMPTS, strict=True)
    ]
    together = [_tokens(events) for events in _interleaved(streams)]
    assert together == alone
    # One pass a step carried every generation still running: the first steps carried all.
    n = len(PROMPTS)
    rounds = min(len(tokens) for tokens in alone) // 9  # each round adds at most 9 tokens
    assert [len(b) for b in spec.target.batches[:rounds]] == [n] * rounds
    assert batch.passes == len(spec.target.batches)
    # Each lane's cells are its own sequence's, as its mirror says.
    cells = [spec.target._seqs[i] for i in range(n)]
    assert cells == [lane.session.cached_tokens for lane in lanes]
    drafts = [spec.draft._seqs.get(i, []) for i in range(n)]
    assert drafts == [lane._draft_cache.tokens for lane in lanes]  # type: ignore[union-attr]


def test_a_generation_that_joins_later_shares_the_next_pass() -> None:
    spec = _spec(2)
    long, short = spec.lanes(2)
    batch = _batch([long])
    chat = long.stream(PROMPTS[0], drafter="none", max_tokens=120)
    for _ in range(30):
        next(chat)
    before = batch.passes
    completion = list(short.stream(PROMPTS[1], drafter="none", max_tokens=8))
    # The short one ran to its end while the long one was still going: it did not wait.
    assert isinstance(completion[-1], DoneEvent) and batch.active == 1
    reads = -(-(len(spec.prompt_tokens(PROMPTS[1])) - 1) // batch.chunk(1))  # beside a token
    assert batch.passes - before <= reads + 8  # its prompt's passes and one a token
    assert all(len(b) == 2 for b in spec.target.batches[before:])
    chat.close()


def test_a_closed_generation_leaves_the_batch_within_a_step_and_keeps_only_its_tokens() -> None:
    spec = _spec(2)
    alone = _tokens(list(_spec(1).stream(PROMPTS[1], drafter="model", max_tokens=50)))
    a, b = spec.lanes(2)
    batch = _batch([a])
    left = a.stream(PROMPTS[0], drafter="model", max_tokens=200)
    stays = b.stream(PROMPTS[1], drafter="model", max_tokens=50)
    committed = [e.token for e in (next(left) for _ in range(12)) if isinstance(e, TokenEvent)]
    left.close()
    assert batch.active == 1
    prompt = spec.prompt_tokens(PROMPTS[0])
    # Its cells hold what it committed (up to the end of the round its last read came from, but
    # the last token, as between rounds), nothing drafted; and so do the draft model's.
    cached = a.session.cached_tokens
    assert spec.target._seqs[0] == cached and cached[: len(prompt)] == prompt
    assert committed[:-1] == cached[len(prompt) : len(prompt) + len(committed) - 1]
    assert len(prompt) + len(committed) - 1 <= len(cached) <= len(prompt) + len(committed) + 9
    held = spec.draft._seqs[0]  # the draft's cache may hold the last token too
    assert held[: len(cached)] == cached[: len(held)] and len(held) <= len(cached) + 1
    assert _tokens(list(stays)) == alone
    assert all(0 not in b for b in spec.target.batches[-3:])


class _Broken(ModelDrafter):
    def offer(self, context: Sequence[int], room: int) -> list[Proposal]:
        if len(context) > 40:
            raise RuntimeError("this drafter broke")
        return super().offer(context, room)


def test_one_generations_failure_ends_it_alone() -> None:
    spec = _spec(2)
    alone = _tokens(list(_spec(1).stream(PROMPTS[0], drafter="model", max_tokens=60)))
    a, b = spec.lanes(2)
    batch = _batch([a])
    fails = b.stream(PROMPTS[1], drafter=_Broken(b._draft_cache), k=4, max_tokens=60)  # type: ignore[arg-type]
    runs = a.stream(PROMPTS[0], drafter="model", max_tokens=60)
    with pytest.raises(RuntimeError, match="this drafter broke"):
        list(fails)
    assert _tokens(list(runs)) == alone
    assert batch.active == 0


# --- sampling: two generations drawn in one pass each keep the target's distribution ------


def _two_at_once(params: SamplingParams, n: int) -> tuple[Counter, FakeModel]:  # type: ignore[type-arg]
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, sequences=2)
    draft = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, noise=1.0, noise_seed=5, sequences=2)
    batch = Batch(target)
    sessions = [Session(Lane(target, s), batch.join) for s in (0, 1)]  # type: ignore[arg-type]
    drafters = [ModelDrafter(Lane(draft, s), p_min=0.0) for s in (0, 1)]  # type: ignore[arg-type]
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        streams: list[Generator[Event, None, None]] = []
        for s in (0, 1):
            sampling = dataclasses.replace(params, seed=7000 + 2 * i + s)
            config = GenerationConfig(max_tokens=STEPS, sampling=sampling)
            streams.append(sessions[s].generate(PROMPT, drafters[s], config, 3))
        for events in _interleaved(streams):
            counts[tuple(_tokens(events))] += 1
    return counts, target


@pytest.mark.parametrize("params", sorted(SEQ_PARAMS))
def test_two_sequences_sampled_in_one_pass_match_the_target(params: str) -> None:
    p = SEQ_PARAMS[params]
    counts, target = _two_at_once(p, 1000)
    assert sum(len(b) == 2 for b in target.batches) >= 1000  # every pair shared a round
    assert chi2_pvalue(counts, exact_sequence_probs(target, p)) > PASS_P


def test_two_sequences_in_one_pass_reject_a_wrong_verifier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate_module, "verify_sampled", accept_without_coin)
    p = SEQ_PARAMS["t=1"]
    counts, target = _two_at_once(p, 1000)
    assert chi2_pvalue(counts, exact_sequence_probs(target, p)) < FAIL_P


def test_a_generation_dropped_unread_leaves_the_batch() -> None:
    spec = _spec(2)
    lane = spec.lanes(2)[0]
    batch = _batch([lane])
    events = lane.stream(PROMPTS[0], drafter="model", max_tokens=20)
    assert batch.active == 1
    del events
    assert batch.active == 0


def test_a_lane_reads_and_writes_only_its_own_sequence() -> None:
    model = FakeModel(n_vocab=8, sequences=3)
    lanes = [Lane(model, s) for s in range(3)]  # type: ignore[arg-type]
    rows = [lane.decode([1, 2, s], 2) for s, lane in enumerate(lanes)]
    assert [lane.n_past for lane in lanes] == [3, 3, 3]
    lanes[1].rewind(1)
    assert [lane.n_past for lane in lanes] == [3, 1, 3]
    np.testing.assert_array_equal(rows[2][0], model.logits_for([1, 2]))
    np.testing.assert_array_equal(rows[2][1], model.logits_for([1, 2, 2]))
    assert not hasattr(lanes[0], "decode_tree") and lanes[0].tree_width == 1
    # A lent decode would be sequence 0's: a cache on a lane decodes on the lane.
    assert not hasattr(lanes[2], "decode_lent")
    CachedModel(lanes[2]).decode([5], 1)  # type: ignore[arg-type]
    assert [lane.n_past for lane in lanes] == [3, 1, 4]
    with pytest.raises(AttributeError):
        lanes[0].close()  # type: ignore[attr-defined]
    assert isinstance(RoundEvent, type)


@pytest.mark.real
def test_real_pair_two_greedy_prompts_batched_give_what_each_gives_alone(real_pair) -> None:  # type: ignore[no-untyped-def]
    from edgespec.bench.runner import near_tie
    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    options = LoadOptions(n_ctx=1024, sequences=2)
    target = LlamaModel(real_pair.target, options)
    draft = LlamaModel(real_pair.draft, options)
    try:
        spec = Speculator(target, draft)
        prompts = ["Write a Python function that checks if a number is prime.", "Name 5 fruits."]
        alone = [_tokens(list(spec.stream(p, drafter="model", max_tokens=64))) for p in prompts]
        spec.session.reset()
        spec._draft_cache.reset()  # type: ignore[union-attr]
        lanes = spec.lanes(2)
        batch = _batch(lanes)
        streams = [
            lane.stream(p, drafter="model", max_tokens=64)
            for lane, p in zip(lanes, prompts, strict=True)
        ]
        together = [_tokens(events) for events in _interleaved(streams)]
        assert batch.passes < sum(map(len, alone))  # the passes were shared
        for prompt, base, other in zip(prompts, alone, together, strict=True):
            if base == other:
                continue
            i = next(j for j, (x, y) in enumerate(zip(base, other, strict=False)) if x != y)
            spec.session.reset()
            logits = target.decode([*spec.prompt_tokens(prompt), *base[:i]], 1)[0]
            assert near_tie(logits, base[i], other[i])[1], (prompt, i)
    finally:
        target.close()
        draft.close()


# --- the policy prices the shared pass -------------------------------------------------------

# A CPU's passes: nearly flat up to a few tokens, then a step's cost a few tokens more.
CPU = CostModel({1: 1.0, 2: 1.05, 3: 1.1, 4: 1.2, 5: 1.3, 8: 1.6, 16: 2.6, 32: 4.6, 64: 8.6}, 0.05)
# A GPU's (or a heavy target's): flat far beyond one sequence's draft.
FLAT_GPU = CostModel({n: 1.0 + 0.002 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16, 32, 64)}, 0.05)


def test_a_draft_is_priced_at_the_shared_pass_total_size() -> None:
    from edgespec.auto.costs import LearnedCosts, Load
    from edgespec.engine.drafters import DraftKind

    def shared(prior: CostModel, others: int, seqs: int, alpha: float) -> tuple[int, float]:
        return LearnedCosts(prior, 0.03).best_k(DraftKind.LOOKUP, alpha, 8, load=Load(others, seqs))

    costs = LearnedCosts(CPU, 0.03)
    assert costs.verify_s(5, Load(3)) == pytest.approx(0.03 * CPU.tau(8))  # the whole pass
    for alpha in (0.6, 0.8):
        alone, full = shared(CPU, 0, 0, alpha), shared(CPU, 3, 3, alpha)
        # A CPU pass of three other sequences' plain steps: a draft slows all four, so less
        # speculation, and it gains less.
        assert full[0] < alone[0] and full[1] < alone[1]
        # Where the pass is flat, drafting stays nearly free: as long a draft as alone.
        assert shared(FLAT_GPU, 3, 3, alpha)[0] == shared(FLAT_GPU, 0, 0, alpha)[0]


def test_policies_sharing_the_costs_price_each_round_at_its_own_load() -> None:
    """Two lanes' policies on one `LearnedCosts`, each told its own pass's load: each prices its
    round at its load whatever the other did in between, and leaves no load on the shared
    costs for whoever prices next."""
    from edgespec.auto.costs import LearnedCosts, Load
    from edgespec.auto.policy import AdaptiveDraftLength
    from edgespec.engine.drafters import DraftKind, Lookup

    costs = LearnedCosts(CPU, 0.03)
    busy = AdaptiveDraftLength(costs, load=lambda: (6, 3, 0))
    alone = AdaptiveDraftLength(costs, load=lambda: (0, 0, 0))
    copy = Lookup(tuple(range(16)), 8, "suffix")
    preview = AdaptiveDraftLength(LearnedCosts(CPU, 0.03)).preview_lookup(copy, 0.9)
    other = alone.choose([copy])
    first = busy.choose([copy])  # between the other's choice and its outcome
    assert first is not None and other is not None and first.k > 0
    assert alone.preview_lookup(copy, 0.9) == preview  # still priced alone
    assert first.predicted_s == costs.round_s(DraftKind.LOOKUP, first.k, load=Load(6, 3))
    assert other.predicted_s == costs.round_s(DraftKind.LOOKUP, other.k)
    event = RoundEvent(drafter="suffix", k=first.k, drafted=first.k, accepted=0, verify_s=0.06)
    busy.observe(first, event, 0.1)
    assert list(costs.per_n) == [6 + first.k + 1]  # its pass timed whole, at its total size


def test_each_lanes_policy_prices_its_rounds_at_the_other_lanes_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from edgespec.auto.costs import ALONE, LearnedCosts, Load
    from edgespec.engine.drafters import DraftKind

    seen: list[int] = []
    best_k = LearnedCosts.best_k

    def spy(
        self: LearnedCosts,
        kind: DraftKind,
        alpha: float,
        limit: int,
        behind: int = 0,
        left: int = 0,
        load: Load = ALONE,
    ) -> tuple[int, float]:
        seen.append(load.tokens)
        return best_k(self, kind, alpha, limit, behind, left, load)

    monkeypatch.setattr(LearnedCosts, "best_k", spy)
    list(_spec(1).stream(PROMPTS[0], drafter="auto", max_tokens=40))
    assert seen and set(seen) == {0}  # alone: nothing else in its passes
    seen.clear()
    spec = _spec(2)
    streams = [
        lane.stream(p, drafter="auto", max_tokens=40)
        for lane, p in zip(spec.lanes(2), PROMPTS[:2], strict=True)
    ]
    _interleaved(streams)
    assert max(seen) > 0  # the other lane's tokens were counted in


def test_a_long_prompt_shares_the_batch_a_chunk_at_a_time() -> None:
    target = FakeModel(n_vocab=8, n_ctx=512, sequences=2)
    batch = Batch(target, chunk=lambda others: 16)
    sessions = [Session(Lane(target, s), batch.join) for s in (0, 1)]  # type: ignore[arg-type]
    config = GenerationConfig(max_tokens=30)
    plain = NgramDrafter()
    running = sessions[0].generate([1, 2, 3], plain, config, 0)
    next(running)  # the first generation runs its rounds
    prompt = [i % 8 for i in range(100)]
    first = len(target.batches)
    long = list(sessions[1].generate(prompt, plain, config, 0))
    reads = [b for b in target.batches[first:] if 1 in b]
    # 99 prompt tokens in chunks of 16 (7 batches), beside the other's rounds, then its own.
    assert all(len(b) == 2 for b in target.batches[first : first + 7])
    assert len(reads) >= 7 + 30 - 1
    alone = Session(FakeModel(n_vocab=8, n_ctx=512))
    assert _tokens(long) == _tokens(list(alone.generate(prompt, plain, config, 0)))
    assert target._seqs[1][:99] == prompt[:99]
    running.close()


class _Poisoned(FakeModel):
    """A decode error for any batch that carries token 7 three times in a row."""

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        if any("7, 7, 7" in str(list(tokens)) for _, tokens, _ in requests):
            raise EdgespecError("llama_decode failed with code 1 (a batch of sequences)")
        return super().decode_batch(requests)


def test_a_failed_batch_is_retried_pass_by_pass_a_prompt_chunk_too() -> None:
    target = _Poisoned(n_vocab=8, n_ctx=512, sequences=2)
    batch = Batch(target, chunk=lambda others: 16)
    sessions = [Session(Lane(target, s), batch.join) for s in (0, 1)]  # type: ignore[arg-type]
    config = GenerationConfig(max_tokens=20)
    prompt = [i % 7 for i in range(100)]
    good = sessions[0].generate(prompt, NgramDrafter(), config, 0)
    bad = sessions[1].generate([1, 7, 7, 7, 2], NgramDrafter(), config, 0)
    with pytest.raises(EdgespecError, match="llama_decode failed"):
        list(bad)
    alone = Session(FakeModel(n_vocab=8, n_ctx=512)).generate(prompt, NgramDrafter(), config, 0)
    assert _tokens(list(good)) == _tokens(list(alone))


def test_the_batch_lock_goes_to_a_waiting_thread_before_the_one_that_let_it_go() -> None:
    """A reader that let the lock go after its step asks for it again at once, while another
    reader waits for it: the waiter has it first (with a plain lock the first reader took it
    back, and the second client's request waited for the first one's whole answer)."""
    lock = FairLock()
    order: list[str] = []

    def waiter() -> None:
        with lock:
            order.append("waiter")

    lock.acquire()
    thread = threading.Thread(target=waiter)
    thread.start()
    while not lock._queue:  # the waiter asked for it
        time.sleep(0.001)
    lock.release()
    with lock:
        order.append("releaser")
    thread.join()
    assert order == ["waiter", "releaser"]


def test_the_batch_lock_is_reentrant_and_only_its_holder_lets_it_go() -> None:
    lock = FairLock()
    with lock, lock:  # a step inside a reader's turn takes it again
        pass
    failed: list[BaseException] = []

    def release() -> None:
        try:
            lock.release()
        except RuntimeError as exc:
            failed.append(exc)

    with lock:
        thread = threading.Thread(target=release)
        thread.start()
        thread.join()
    assert len(failed) == 1
    with pytest.raises(RuntimeError):
        lock.release()  # not held


def test_readers_in_threads_have_every_shared_step_run_on_the_batchs_one_thread() -> None:
    """llama.cpp's CPU backend keeps a team of threads per calling thread: while several
    generations run, the passes and each generation's own work (its draft model's steps) run
    on the batch's thread, not on whichever reader's thread asked for the step; a generation
    running alone is stepped by its reader."""
    spec = _spec(2)
    lanes = spec.lanes(2)
    batch = _batch(lanes)
    callers: dict[tuple[str, bool], set[int]] = {}
    for name, model in (("target", spec.target), ("draft", spec.draft)):
        for method in ("decode_batch", "decode"):
            if hasattr(model, method):
                inner = getattr(model, method)

                def recorded(*args: object, _inner=inner, _name=name) -> object:  # type: ignore[no-untyped-def]
                    shared = batch.active > 1
                    callers.setdefault((_name, shared), set()).add(threading.get_ident())
                    return _inner(*args)

                setattr(model, method, recorded)
    answers: dict[int, list[int]] = {}
    readers: set[int] = set()
    started = threading.Barrier(2)

    def read(i: int) -> None:
        readers.add(threading.get_ident())
        stream = lanes[i].stream(PROMPTS[i], drafter="model", max_tokens=30)
        started.wait()
        answers[i] = _tokens(list(stream))

    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(len(answers[i]) == 30 for i in range(2))
    shared = callers[("target", True)]
    assert len(shared) == 1 and callers[("draft", True)] == shared
    assert not shared & readers
    assert callers.get(("target", False), set()) <= readers
