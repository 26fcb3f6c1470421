"""Tree drafts: the tree itself, its verification (lossless: greedy equality and chi-squared
tests with negative controls, as for chains), the suffix drafter's forks, the policy that turns
trees on only where verification is cheap, and the llama.cpp layout of a tree's sequences."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from edgespec.auto.config import SuffixConfig
from edgespec.auto.learning import Bucket
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine import generate as generate_module
from edgespec.engine import tree as tree_module
from edgespec.engine.drafters import DraftKind, Lookup, ModelDrafter, Proposal
from edgespec.engine.events import RoundEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.sampling import Sampler, SamplingParams
from edgespec.engine.tree import ROOT, TreeDraft, TreeOutcome, branch_lengths, verify_tree
from edgespec.llamacpp.model import tree_layout
from tests.fakes import FakeModel, TreeAlways, pair
from tests.proposals import lookup, model
from tests.stats import (
    FAIL_P,
    PASS_P,
    PROMPT,
    SEQ_PARAMS,
    STEPS,
    chi2_pvalue,
    exact_sequence_probs,
)

# --- the tree ------------------------------------------------------------------------------


def test_branches_merge_into_a_trie() -> None:
    tree = TreeDraft.build([5, 6, 7], [(1, [8, 9]), (1, [8, 3]), (0, [4]), (3, [2])], "ngram")
    assert tree.tokens == [5, 6, 7, 8, 9, 3, 4, 2]
    assert tree.parents == [ROOT, 0, 1, 0, 3, 3, ROOT, 2]
    assert tree.main == 3 and len(tree) == 8
    assert tree.width == 4  # leaves: 9, 3, 4, 2
    assert tree.path(5) == [0, 3, 5]
    assert tree.batch_parents() == [ROOT, 0, 1, 2, 1, 4, 4, 0, 3]
    with pytest.raises(ValueError, match="already a child"):
        TreeDraft([1, 1], [ROOT, ROOT], 1)
    with pytest.raises(ValueError, match="not an earlier node"):
        TreeDraft([1, 2], [1, ROOT], 1)


def test_within_drops_nodes_the_target_cannot_read() -> None:
    tree = TreeDraft.build([5, 6, 7], [(1, [8, 9]), (0, [2])], "model")
    assert tree.within(10) is tree
    cut = tree.within(7)  # 7, 8 and 9 go, and so does what hangs below 8
    assert (cut.tokens, cut.parents, cut.main) == ([5, 6, 2], [ROOT, 0, ROOT], 2)
    assert tree.within(6).main == 1 and tree.within(5).tokens == [2]


def test_nothing_below_an_end_of_generation_node_is_verified() -> None:
    # Main chain 5 2 7 8 with 2 the end of generation; branches after 5 (9 10) and after 7 (11).
    tree = TreeDraft.build([5, 2, 7, 8], [(1, [9, 10]), (3, [11])], "ngram")
    cut = tree.through_end(lambda token: token == 2)
    assert cut.tokens == [5, 2, 9, 10] and cut.parents == [ROOT, 0, 0, 2] and cut.main == 2
    assert tree.through_end(lambda token: token == 99) is tree


def test_branch_lengths_share_the_nodes_out() -> None:
    assert branch_lengths(7, 3) == [3, 2, 2]
    assert branch_lengths(0, 2) == [0, 0]
    assert branch_lengths(5, 0) == []


def test_llama_layout_gives_each_row_its_ancestors_sequences() -> None:
    # root -> a -> b ; root -> c -> d ; c -> e ; a -> f
    depth, seqs = tree_layout([-1, 0, 1, 0, 3, 3, 1])
    assert depth == [0, 1, 2, 1, 2, 2, 2]
    # leaves in row order: 2 -> seq 0, 4 -> 1, 5 -> 2, 6 -> 3
    assert seqs == [[0, 1, 2, 3], [0, 3], [0], [1, 2], [1], [2], [3]]
    with pytest.raises(ValueError, match="root"):
        tree_layout([-1, -1])
    with pytest.raises(ValueError, match="root"):
        tree_layout([-1, 2, 0])


def _logits(winners: dict[int, int], rows: int, n_vocab: int = 10) -> np.ndarray:
    out = np.zeros((rows, n_vocab), dtype=np.float32)
    for row in range(rows):
        out[row, winners.get(row, 0)] = 5.0
    return out


def test_greedy_walk_follows_the_argmax_into_a_branch() -> None:
    tree = TreeDraft.build([5, 6, 7], [(1, [8, 9])], "ngram")  # nodes: 5 6 7 | 8 9
    sampler = Sampler(SamplingParams())
    # row 0 -> 5 (node 0), row 1 (after 5) -> 8 (node 3), row 4 (after 8) -> 9 (node 4),
    # row 5 (after 9) -> 1: not in the tree, the target's own token.
    path, nxt, outcome = verify_tree(tree, _logits({0: 5, 1: 8, 4: 9, 5: 1}, 6), sampler)
    assert (path, nxt) == ([0, 3, 4], 1)
    assert outcome == TreeOutcome(main_drafted=3, main_accepted=1, offered=True, taken=True)
    path, nxt, outcome = verify_tree(tree, _logits({0: 5, 1: 6, 2: 2}, 6), sampler)
    assert (path, nxt) == ([0, 1], 2)
    assert outcome == TreeOutcome(3, 2, offered=False, taken=False)


# --- losslessness through the engine ------------------------------------------------------

UNIGRAMS = SuffixConfig(min_n=1)  # lookups down to one token: forks everywhere


def _generate(
    session: Session, drafter: object, policy: object, config: GenerationConfig
) -> list[int]:
    events = session.generate(PROMPT, drafter, config, policy)  # type: ignore[arg-type]
    return [e.token for e in events if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("seed", range(6))
def test_greedy_tree_output_equals_plain_output(seed: int) -> None:
    target = FakeModel(n_vocab=6, order=2, scale=2.0, seed=seed, tree_width=4)
    config = GenerationConfig(max_tokens=80)
    plain = _generate(Session(target), SuffixDrafter(UNIGRAMS), TreeAlways(0, 0, 1), config)
    policy = TreeAlways(4, 10, 4)
    rounds: list[RoundEvent] = []
    session = Session(target)
    events = list(session.generate(PROMPT, SuffixDrafter(UNIGRAMS), config, policy))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert [e.token for e in events if isinstance(e, TokenEvent)] == plain
    trees = [r for r in rounds if r.tree is not None]
    assert trees, "no tree was verified: the test would prove nothing"
    taken = any(r.tree.taken for r in trees if r.tree is not None)
    assert taken or seed != 1  # with seed 1 the target takes a branch
    assert target.tokens == session.cached_tokens


def tree_sequence_counts(params: SamplingParams, n: int) -> Counter:  # type: ignore[type-arg]
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, tree_width=4)
    session = Session(target)
    # Unigram statistics of a 4-token vocabulary: forks (several children of a node) everywhere.
    drafter = SuffixDrafter(SuffixConfig(max_n=1, min_n=1))
    policy = TreeAlways(2, 6, 4)
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        sampling = replace(params, seed=7000 + i)
        drafter.memory.forget()
        # A context rich in forks: each 1-gram of the prompt was followed by several tokens.
        prompt = [1, 3, 0, 1, 2, 1, 3, 2, 3, 0, 3, 1, 3]
        config = GenerationConfig(max_tokens=STEPS, sampling=sampling)
        events = session.generate(prompt, drafter, config, policy)
        counts[tuple(e.token for e in events if isinstance(e, TokenEvent))] += 1
    assert policy.trees >= n  # every generation verified trees
    return counts


def _exact(params: SamplingParams) -> dict[tuple[int, ...], float]:
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21)
    prompt = [1, 3, 0, 1, 2, 1, 3, 2, 3, 0, 3, 1, 3]
    return exact_sequence_probs(target, params, prompt)


@pytest.mark.parametrize("params", sorted(SEQ_PARAMS))
def test_sampled_tree_sequences_match_the_target(params: str) -> None:
    p = SEQ_PARAMS[params]
    assert chi2_pvalue(tree_sequence_counts(p, 3000), _exact(p)) > PASS_P


def coins_per_child(
    tree: TreeDraft, logits: np.ndarray, sampler: Sampler
) -> tuple[list[int], int, TreeOutcome]:
    """Wrong: each child is accepted with its own coin p(x), one after the other, and the
    token after all of them fail is drawn from p without the first child only."""
    node, path = ROOT, []
    while True:
        p = sampler.probs(logits[node + 1])
        children = tree.children(node)
        for child in children:
            if sampler.rng.random() < p[tree.tokens[child]]:
                path.append(child)
                node = child
                break
        else:
            residual = p.copy()
            if children:
                residual[tree.tokens[children[0]]] = 0.0
            y = sampler.draw(residual / residual.sum())
            return path, y, TreeOutcome(tree.main, 0, False, False)


def second_chance(
    tree: TreeDraft, logits: np.ndarray, sampler: Sampler
) -> tuple[list[int], int, TreeOutcome]:
    """Wrong: a token that matches no child is drawn once more, giving the tree a second
    chance (more accepted tokens, and a distribution leaning towards the drafts)."""
    node, path = ROOT, []
    while True:
        p = sampler.probs(logits[node + 1])
        y = sampler.draw(p)
        if tree.child(node, y) is None:
            y = sampler.draw(p)
        nxt = tree.child(node, y)
        if nxt is None:
            return path, y, TreeOutcome(tree.main, 0, False, False)
        path.append(nxt)
        node = nxt


@pytest.mark.parametrize("wrong", [coins_per_child, second_chance])
def test_tree_negative_controls_fail(wrong: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate_module, "verify_tree", wrong)
    p = SEQ_PARAMS["t=1"]
    assert chi2_pvalue(tree_sequence_counts(p, 3000), _exact(p)) < FAIL_P


# --- forks from the suffix index -----------------------------------------------------------


def test_suffix_drafter_offers_forks_and_builds_trees_from_them() -> None:
    drafter = SuffixDrafter(SuffixConfig(max_n=2, min_n=1))
    # After "1 2" came "3 4" twice and "5 6" once: main chain 3 4, a fork to 5 at depth 0.
    tokens = [1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 5, 6, 0, 1, 2]
    drafter.begin(tokens)
    (offered,) = drafter.offer(tokens, 8)
    assert isinstance(offered, Lookup) and offered.forks and offered.forks[0] == 0
    tree = offered.tree(2, 4, 2, 8)
    assert tree.tokens[: tree.main] == [3, 4]
    assert tree.path(len(tree) - 1)[0] == tree.main  # the branch hangs off the root
    assert [tree.tokens[n] for n in tree.path(len(tree) - 1)] == [5, 6]


# --- the policy: trees where verification is cheap, chains where it is steep -----------------


def _policy(tau: dict[int, float]) -> AdaptiveDraftLength:
    return AdaptiveDraftLength(CostModel(tau, c=0.0), tree_width=4)


def _forked(available: int, forks: tuple[int, ...]) -> Lookup:
    return lookup(available, 2, forks=forks)


def test_policy_verifies_trees_where_extra_tokens_cost_nothing() -> None:
    flat = {n: 1.0 + 0.01 * n for n in range(1, 33)}
    choice = _policy(flat).choose([_forked(3, (0, 1))])
    assert choice is not None and choice.width > 1 and choice.nodes > choice.k


def test_policy_keeps_chains_where_verification_is_steep() -> None:
    steep = {n: float(n) for n in range(1, 33)}
    choice = _policy(steep).choose([_forked(3, (0, 1))])
    assert choice is None or choice.width == 1


def test_policy_learns_how_often_forks_are_taken() -> None:
    policy = _policy({n: 1.0 for n in range(1, 33)})
    before = dict(policy.state.fork_hit)
    for _ in range(20):
        choice = policy.choose([_forked(3, (0,))])
        outcome = TreeOutcome(3, 0, offered=True, taken=False)
        policy.observe(
            choice, RoundEvent(drafter="suffix", k=3, drafted=6, accepted=0, tree=outcome), 0.0
        )
    lookups, models = DraftKind.LOOKUP, DraftKind.MODEL
    assert policy.state.fork_hit[lookups] < before[lookups] / 4
    assert policy.state.fork_hit[models] == before[models]  # the draft model's leaves apart
    # A main chain that is always accepted keeps its acceptance rate up, whatever the branches.
    alpha = policy.state.alpha[Bucket.SHORT]
    for _ in range(20):
        choice = policy.choose([_forked(3, (0,))])
        round_ = RoundEvent(
            drafter="suffix", k=3, drafted=6, accepted=3, tree=TreeOutcome(3, 3, False, False)
        )
        policy.observe(choice, round_, 0.0)
    assert policy.state.alpha[Bucket.SHORT] > alpha


# --- the draft model's second choices as leaves ---------------------------------------------


def _scripted_draft(rows: dict[int, list[float]], n_vocab: int = 6) -> FakeModel:
    """A first-order draft whose logits after token t are rows[t] (zeros elsewhere)."""
    draft = FakeModel(n_vocab=n_vocab, order=1)
    draft.table = np.zeros((n_vocab, n_vocab))
    for token, row in rows.items():
        draft.table[token] = row
    return draft


def test_model_drafter_puts_second_choices_where_the_chain_may_miss() -> None:
    # After 0: 1 (sure). After 1: 2 or 3 (close). After 2: 4 (sure). After 4: 5 or 0 (close).
    draft = _scripted_draft(
        {
            0: [0, 9, 0, 0, 0, 0],
            1: [0, 0, 4, 3.5, 0, 0],
            2: [0, 0, 0, 0, 9, 0],
            4: [3, 0, 0, 0, 0, 3.2],
        }
    )
    drafter = ModelDrafter(draft, p_min=0.0)
    tree = drafter.propose_tree([0], 4, nodes=6, width=3, depth=8)
    assert tree.tokens[: tree.main] == [1, 2, 4, 5]  # the draft's argmax, not a sample
    # Two leaves, at the close calls: 3 beside 2 (depth 1), 0 beside 5 (depth 3).
    leaves = {(len(tree.path(n)) - 1, tree.tokens[n]) for n in range(tree.main, len(tree))}
    assert leaves == {(1, 3), (3, 0)} and tree.width == 3
    # No room for leaves: the chain alone. A stop by the chain's own rule: both likeliest
    # tokens where it stopped are leaves (already scored).
    assert len(drafter.propose_tree([0], 4, nodes=4, width=3, depth=8)) == 4
    drafter.p_min = 0.7  # stops at the close call after 1
    tree = drafter.propose_tree([0], 4, nodes=6, width=3, depth=8)
    assert tree.tokens[: tree.main] == [1]
    assert sorted(tree.tokens[tree.main :]) == [2, 3] and tree.width == 2
    # The depth bounds every path.
    assert max(len(tree.path(n)) for n in range(len(tree))) <= 8
    short = drafter.propose_tree([0], 4, nodes=6, width=3, depth=1)
    assert max(len(short.path(n)) for n in range(len(short))) == 1


def test_a_sampled_model_tree_draws_its_chain_and_leaves_the_likeliest_other_token() -> None:
    # After 0: 1 or 2 (close). After 1 or 2: 4 (sure).
    sure = [-30, -30, -30, -30, 9, -30]
    draft = _scripted_draft({0: [-30, 4, 3.8, -30, -30, -30], 1: sure, 2: sure})
    drafter = ModelDrafter(draft, p_min=0.0)
    firsts = Counter()  # type: ignore[var-annotated]
    for seed in range(40):
        sampler = Sampler(SamplingParams(temperature=1.0, seed=seed))
        tree = drafter.propose_tree([0], 2, nodes=4, width=2, depth=8, sampler=sampler)
        first = tree.tokens[0]
        firsts[first] += 1
        q0 = np.asarray(tree.q[0])
        assert q0.argmax() == 1 and abs(q0.sum() - 1.0) < 1e-9
        # The one leaf, beside the drawn token at the close call: the likeliest other token.
        (leaf,) = range(tree.main, len(tree))
        assert tree.parents[leaf] == ROOT and tree.tokens[leaf] == (2 if first == 1 else 1)
    assert firsts[1] > 5 and firsts[2] > 5  # drawn, not the argmax
    # Top-p leaves the draft one token where it was unsure: no leaf the draft gives no chance.
    narrow = Sampler(SamplingParams(temperature=1.0, top_p=0.5, seed=1))
    tree = drafter.propose_tree([0], 2, nodes=4, width=2, depth=8, sampler=narrow)
    assert tree.tokens == [1, 4] and tree.width == 1
    greedy = drafter.propose_tree(
        [0], 2, nodes=4, width=2, depth=8, sampler=Sampler(SamplingParams())
    )
    assert greedy.tokens[:2] == [1, 4] and greedy.q == ()


def test_a_sampled_main_token_the_target_lacks_is_kept_to_be_rejected() -> None:
    q = (np.full(6, 1 / 6), np.full(6, 1 / 6))
    tree = TreeDraft.build([1, 5], [(1, [2])], "model", (0.2, 0.2), q)
    cut = tree.within(5)
    assert cut.tokens == [1, 2] and cut.main == 1 and len(cut.q) == 2  # q of the cut token
    assert len(tree.through_end(lambda t: t == 1).q) == 1  # nothing is verified past the end


@pytest.mark.parametrize("seed", range(4))
def test_greedy_model_tree_output_equals_plain_output(seed: int) -> None:
    target, draft = pair(seed, noise=1.5, n_vocab=8, tree_width=4)
    config = GenerationConfig(max_tokens=60)
    plain = _generate(Session(target), ModelDrafter(draft, p_min=0.0), TreeAlways(0, 0, 1), config)
    session = Session(target)
    policy = TreeAlways(4, 7, 4)
    events = list(session.generate(PROMPT, ModelDrafter(draft, p_min=0.0), config, policy))
    assert [e.token for e in events if isinstance(e, TokenEvent)] == plain
    trees = [e.tree for e in events if isinstance(e, RoundEvent) and e.tree is not None]
    assert trees and any(t.taken for t in trees), "no leaf was taken: the test proves nothing"
    assert target.tokens == session.cached_tokens


def model_tree_sequence_counts(params: SamplingParams, n: int) -> Counter:  # type: ignore[type-arg]
    target = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, tree_width=4)
    draft = FakeModel(n_vocab=4, order=2, scale=1.5, seed=21, noise=1.5, noise_seed=5)
    session = Session(target)
    drafter = ModelDrafter(draft, p_min=0.0)
    policy = TreeAlways(2, 5, 4)  # a chain of 2 and 3 leaves
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(n):
        config = GenerationConfig(max_tokens=STEPS, sampling=replace(params, seed=9000 + i))
        events = session.generate([1, 3], drafter, config, policy)
        counts[tuple(e.token for e in events if isinstance(e, TokenEvent))] += 1
    assert policy.trees >= n
    return counts


@pytest.mark.parametrize("params", sorted(SEQ_PARAMS))
def test_sampled_model_tree_sequences_match_the_target(params: str) -> None:
    p = SEQ_PARAMS[params]
    exact = exact_sequence_probs(FakeModel(n_vocab=4, order=2, scale=1.5, seed=21), p, [1, 3])
    assert chi2_pvalue(model_tree_sequence_counts(p, 3000), exact) > PASS_P


@pytest.mark.parametrize("wrong", [coins_per_child, second_chance])
def test_model_tree_negative_controls_fail(wrong: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate_module, "verify_tree", wrong)
    p = SEQ_PARAMS["t=1"]
    exact = exact_sequence_probs(FakeModel(n_vocab=4, order=2, scale=1.5, seed=21), p, [1, 3])
    assert chi2_pvalue(model_tree_sequence_counts(p, 3000), exact) < FAIL_P


def test_a_sampled_tree_that_skips_the_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # Wrong: after its sampled main child is rejected, the target's token is drawn from p
    # instead of the residual max(p - q, 0) (the draft's token comes out too often).
    monkeypatch.setattr(tree_module, "after_rejection", lambda p, q, sampler: sampler.draw(p))
    p = SEQ_PARAMS["t=1"]
    exact = exact_sequence_probs(FakeModel(n_vocab=4, order=2, scale=1.5, seed=21), p, [1, 3])
    assert chi2_pvalue(model_tree_sequence_counts(p, 3000), exact) < FAIL_P


def test_sampled_model_trees_with_a_larger_draft_vocabulary_keep_the_target_distribution() -> None:
    # The draft draws ids the target lacks (cut from the tree, their q kept for the rejection).
    target = FakeModel(n_vocab=4, order=1, scale=1.5, seed=31, tree_width=4)
    draft = FakeModel(n_vocab=6, order=1, scale=1.5, seed=32)
    session, drafter, policy = Session(target), ModelDrafter(draft, p_min=0.0), TreeAlways(3, 5, 3)
    params = SamplingParams(temperature=1.0)
    counts: Counter = Counter()  # type: ignore[type-arg]
    for i in range(3000):
        config = GenerationConfig(max_tokens=STEPS, sampling=replace(params, seed=6000 + i))
        events = session.generate([1, 3], drafter, config, policy)
        counts[tuple(e.token for e in events if isinstance(e, TokenEvent))] += 1
    exact = exact_sequence_probs(FakeModel(n_vocab=4, order=1, scale=1.5, seed=31), params, [1, 3])
    assert chi2_pvalue(counts, exact) > PASS_P


def _model_option() -> Proposal:
    return model(ModelDrafter(FakeModel()), 32)


def test_policy_adds_leaves_to_model_drafts_only_where_verification_is_cheap() -> None:
    flat = {n: 1.0 + 0.01 * n for n in range(1, 40)}
    policy = AdaptiveDraftLength(CostModel(flat, c=0.1), tree_width=4)
    choice = policy.choose([_model_option()])
    assert choice is not None and choice.k > 0
    assert choice.width == 4 and choice.nodes == choice.k + 3
    # Steep: every token verified costs 0.6 steps more; a sure chain still pays, leaves do not.
    steep = {n: 0.4 + 0.6 * n for n in range(1, 40)}
    policy = AdaptiveDraftLength(CostModel(steep, c=0.1), tree_width=4)
    policy.state.alpha[Bucket.MODEL] = 0.99
    choice = policy.choose([_model_option()])
    assert choice is not None and choice.k > 0 and choice.width == 1
    # Chains only when the target cannot verify trees.
    policy = AdaptiveDraftLength(CostModel(flat, c=0.1), tree_width=1)
    choice = policy.choose([_model_option()])
    assert choice is not None and choice.width == 1


def test_policy_learns_how_often_model_leaves_are_taken() -> None:
    flat = {n: 1.0 + 0.01 * n for n in range(1, 40)}
    policy = AdaptiveDraftLength(CostModel(flat, c=0.1), tree_width=4)
    for _ in range(30):
        choice = policy.choose([_model_option()])
        assert choice is not None
        outcome = TreeOutcome(choice.k, 1, offered=True, taken=False)
        round_ = RoundEvent(
            drafter="model", k=choice.k, drafted=choice.nodes, accepted=1, tree=outcome
        )
        policy.observe(choice, round_, 0.0)
    # Leaves never taken: their rate falls, and with it the leaves (they cost a little).
    assert policy.state.fork_hit[DraftKind.MODEL] < 0.05
    choice = policy.choose([_model_option()])
    assert choice is not None and choice.width == 1
