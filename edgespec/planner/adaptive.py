"""The draft-length policy behind `auto`: every round, the option (n-gram lookup or the draft
model) and the K with the highest expected speed, with the acceptance rates and the costs of
each part of a round learned from the rounds that ran (`learned.py`; the calibration is the
prior). The engine calls it through its `DraftLength` hook; `EitherDrafter` puts both drafters
on offer."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter

from edgespec.engine.drafters import ModelDrafter, NoDrafter, Option
from edgespec.engine.events import RoundEvent
from edgespec.options import K_MAX
from edgespec.planner.confidence import ConfidencePower
from edgespec.planner.costs import CostModel, expected_tokens
from edgespec.planner.learned import CATCH_UP, LearnedCosts

# Starting acceptance rates, per kind of draft. N-gram lookups are tracked apart for short and
# long matches: a long match that copies code is far more reliable than a 2-token one in prose,
# and a match as long as the suffix index holds (8 tokens) means text is being copied (an edited
# file, a quoted passage). Where verification is steep only a high rate pays for a draft, and a
# rate that starts too low never learns better (nothing is drafted): so the copy prior is high,
# and its first misses bring it down. Few buckets, so that each learns from many rounds. The
# draft model's prior: the 0.5B draft's first choice was the 1.5B target's token at 72-98 % of
# the positions of the suites' greedy outputs; replayed on a flat tau with a draft step of 0.3
# target steps, a prior of 0.7 kept it from drafting long enough to learn that (code generation
# 1.18x plain against 1.94x from 0.85); where the model does not pay, 0.85 changes nothing.
# A lookup that takes up again the source a copy left (suffix.py, RESUME_MIN) has its own rate:
# its next token was right at 80-100 % of such places in the editing suites' outputs.
LONG_MATCH = 4
COPY_MATCH = 8
PRIOR_ALPHA = {
    "ngram-short": 0.5,
    "ngram-long": 0.75,
    "ngram-copy": 0.95,
    "ngram-resume": 0.9,
    "model": 0.85,
}
EMA_WEIGHT = 0.1  # per drafted token
# Rejections cluster (the edit points of a copied file), so a long run of acceptances says
# less about the next token than a per-token rate suggests; K is chosen with at most this rate.
# Copies too: replaying the policy on the greedy outputs of the built-in suites
# (scripts/replay_policy.py), a cap of 0.99 for copies (K reached 31 after a few accepted
# tokens) lost to 0.98 on code editing where verifying 16 tokens costs 10.7 steps (1.04x
# against 1.11x plain) and changed nothing where verifying is flat.
ALPHA_CAP = 0.98
# A round that drafts nothing still shows whether a lookup's first token would have been
# accepted (the target's own token is the test, at no cost): without it, a rate that fell below
# what pays (one miss of a copy, where verifying is steep) could rise again only through probes.
# Such a trial weighs half a drafted token: replayed on the built-in suites, a whole one
# brought drafts back on prose before they paid (summarization 1.030x -> 1.022x plain), half
# gained on code editing (1.114x -> 1.128x) and multi-turn editing and lost nowhere.
SHADOW_WEIGHT = EMA_WEIGHT / 2
PROBE_AFTER = 32  # rounds without speculation before a one-token probe
PROBE_MAX = 256  # the wait doubles after each failed probe, up to this
PROBE_MIN_MATCH = 3  # n-gram probes only on matches at least this long
PROBE_K = 1
# A model probe first reads what the draft model missed since it last drafted: it runs only where
# that costs at most this share of the rounds waited (on a 2-core CPU a 0.5B draft reads a token
# for a third of a target step, so never; a model probe there cost 28 % of code generation).
PROBE_BUDGET = 0.05
# Tree drafts: how often the target took a branch where the main chain missed and one was there,
# before any tree ran; a second fork at the same depth counts half. For the draft model's second
# choices, what they were on the suites' greedy outputs where its first was wrong (0.47-0.80).
PRIOR_FORK_HIT = {"ngram": 0.3, "model": 0.5}
BRANCH_MAX = 8  # tokens on one branch: past this its chance of being reached is small


@dataclass
class AdaptiveState:
    alpha: dict[str, float] = field(default_factory=lambda: dict(PRIOR_ALPHA))
    idle_rounds: int = 0
    probe_after: int = PROBE_AFTER
    switches: int = 0  # changes of drafter between speculating rounds
    probes: int = 0
    last_source: str = "none"
    fork_hit: dict[str, float] = field(default_factory=lambda: dict(PRIOR_FORK_HIT))
    confidence: ConfidencePower = field(default_factory=ConfidencePower)  # the draft model's


def _moved(rate: float, trial: float, weight: float = EMA_WEIGHT) -> float:
    """A learned rate after one more trial (1.0: success, 0.0: failure): a moving average."""
    return rate + weight * (trial - rate)


def bucket(option: Option) -> str:
    """Which learned acceptance rate applies to a draft from this option."""
    if option.source == "ngram":
        if option.resumed:
            return "ngram-resume"
        if option.match >= COPY_MATCH:
            return "ngram-copy"
        return "ngram-long" if option.match >= LONG_MATCH else "ngram-short"
    return option.source


class AdaptiveDraftLength:
    """Chooses the option and K per round; `k_max` caps K (the user's -k with `auto`).

    With `step_s` (the calibrated target step, in seconds) the costs are learned from every
    round; without it they stay the calibration's (the unit tests' fixed cost models)."""

    def __init__(
        self,
        costs: CostModel,
        model: ModelDrafter | None = None,
        *,
        k_max: int = K_MAX,
        step_s: float | None = None,
        draft_tau: dict[int, float] | None = None,
        tree_width: int = 1,
    ) -> None:
        self.costs = LearnedCosts(costs, step_s or 1.0, draft_tau)
        self.learn = step_s is not None
        self.k_max = k_max
        self.tree_width = tree_width  # the most leaves of a tree draft (1: chains only)
        self.state = AdaptiveState()
        # The round chosen last: its bucket, whether a probe, its source, predicted seconds,
        # and when it started.
        self._last: tuple[str, bool, bool] | None = None
        self._shadow: tuple[str, int] | None = None  # (bucket, first token) not drafted
        self._pending: tuple[str, float, float, int] | None = None
        self._finished: RoundEvent | None = None
        self._model_k = k_max  # the K chosen for the draft model this round: its stop rule's cap
        self._probing = False  # this round is a probe: its token is drafted, however unsure
        self._cumulative: list[float] = []  # the stop rule's chances this draft, token by token
        if model is not None:
            model.stop_rule = self._model_stop

    def forget(self) -> None:
        """Back to the prior acceptance rates (a new conversation; each bench run). What the
        rounds taught about costs stays: it belongs to the device, not to the text."""
        self.state = AdaptiveState()
        self._pending = None

    def _model_stop(self, drafted: int, cumulative: float) -> bool:
        # Stop before the next token where the round is expected to be faster ending here than
        # going on to any longer draft (within this round's K): a look at every length, not
        # only at the next token, because verification is not convex (verifying 2 tokens cost
        # 1.5 steps and 8 only 2.1 on a CPU with the F16 target, where weighing the next token
        # alone stopped every draft at its first token). The chance that the tokens drafted so
        # far and the next are accepted is the draft's confidence, calibrated against what the
        # target accepted; tokens beyond the next are expected at the learned rate.
        if drafted == 0:
            self._cumulative = []
        self._cumulative.append(cumulative)
        if self._probing:
            return False
        gamma = self.state.confidence.gamma
        chances = [c**gamma for c in self._cumulative]
        alpha = min(self.state.alpha["model"], ALPHA_CAP)
        here = (1.0 + sum(chances[:drafted])) / self._model_round_s(drafted)
        tokens = 1.0 + sum(chances)  # drafting the next one too
        further = chances[-1]
        for n in range(drafted + 1, max(self._model_k, drafted + 1) + 1):
            if tokens / self._model_round_s(n) > here:
                return False
            further *= alpha
            tokens += further
        return True

    def _model_round_s(self, drafted: int) -> float:
        """A round of the draft model that drafts `drafted` tokens (its catch-up included,
        paid whatever it drafts)."""
        costs = self.costs
        return costs.draft["model"].at(drafted) + costs.verify_s(drafted + 1) + costs.rest.value

    def _best(self, option: Option) -> tuple[float, int, Option]:
        """The fastest way to draft from this option: its speed, K of the main chain, and the
        option itself, or as a tree (width and nodes set) when that is faster."""
        limit = min(self.k_max, option.available)
        alpha = min(self.state.alpha[bucket(option)], ALPHA_CAP)
        source = "ngram" if option.free else option.source
        speed, k = 1.0, 0
        if limit > 0:
            k, speed = self.costs.best_k(source, alpha, limit, option.behind, option.available)
        if option.free and option.forks and self.tree_width > 1:
            tree_speed, main, width, nodes = self._best_tree(option, k, alpha, speed)
            if tree_speed > speed + 1e-12:
                return tree_speed, main, replace(option, width=width, nodes=nodes)
        if option.source == "model" and k > 0 and self.tree_width > 1:
            leaves, leaf_speed = self._best_leaves(option, k, alpha)
            if leaf_speed > speed + 1e-12:
                return leaf_speed, k, replace(option, width=leaves + 1, nodes=k + leaves)
        return speed, k, option

    def _best_leaves(self, option: Option, k: int, alpha: float) -> tuple[int, float]:
        """How many of the draft model's second choices to verify as one-token leaves beside
        its chain of k, and the speed that gives (0 leaves: none pays).

        A leaf adds a token where the chain misses and the target takes it; the drafter puts
        the leaves where a miss is likeliest, but here they are counted at the chain's first
        positions (a chain accepted at alpha per token misses there most often): an estimate
        that leans low. Only tree sizes whose verification was measured are costed."""
        hit = self.state.fork_hit["model"]
        chain = expected_tokens(alpha, k)
        best = (0, 0.0)
        for leaves in range(1, min(self.tree_width - 1, k) + 1):
            if k + 1 + leaves not in self.costs.prior.tau_points:
                continue  # only sizes whose verification was measured
            gain = hit * sum(alpha**d * (1.0 - alpha) for d in range(leaves))
            cost = self.costs.round_s("model", k, option.behind, extra=leaves)
            speed = (chain + gain) / cost * self.costs.plain_s
            if speed > best[1]:
                best = (leaves, speed)
        return best

    def _best_tree(
        self, option: Option, k: int, alpha: float, chain_speed: float
    ) -> tuple[float, int, int, int]:
        """The best tree: a main chain (the best chain's K, half of it, or just past the
        forks) plus branches at its first forks, among node counts whose verification was
        measured. Its speed, main chain, width and node count (speed 0: none beats the chain).

        It runs every round, so the work is bounded: a tree whose most optimistic gain cannot
        beat the chain is never costed, which is every tree where verification is steep."""
        offered = option.forks[: self.tree_width - 1]
        best = (0.0, k, 1, k)
        sizes = self.costs.prior.choices(self.k_max)
        # Rounds of each size relative to a plain step, and the cheapest from each size on.
        cost = {n: self.costs.round_s("ngram", n) / self.costs.plain_s for n in sizes}
        later = list(itertools.accumulate((cost[n] for n in reversed(sizes)), min))
        cheapest = dict(zip(reversed(sizes), later, strict=True))
        tail = [expected_tokens(alpha, length - 1) for length in range(BRANCH_MAX + 1)]
        for main in {k, k // 2, min(max(offered) + 1, option.available, self.k_max)}:
            forks = [d for d in offered if d < main or d == main == option.available]
            # What a branch at each fork adds per token its tail is expected to give: it is
            # reached when the chain is accepted that far and then misses (or ends), and taken
            # as often as forks were; a second fork at the same depth counts half.
            reach = [
                alpha**d
                * ((1.0 - alpha) if d < main else 1.0)
                * self.state.fork_hit["ngram"]
                * 0.5 ** forks[:i].count(d)
                for i, d in enumerate(forks)
            ]
            chain = expected_tokens(alpha, main)
            first = next((n for n in sizes if n > main), None)
            if first is None or (chain + sum(reach) * tail[-1]) / cheapest[first] <= chain_speed:
                continue
            for width in range(1, len(forks) + 1):
                for n in sizes:
                    if n - main < width:
                        continue
                    if n - main > width * BRANCH_MAX:
                        break
                    # The branches' lengths as the drafter shares the nodes out (branch_lengths)
                    share, extra = divmod(n - main, width)
                    gain = sum(reach[i] * tail[share + (i < extra)] for i in range(width))
                    speed = (chain + gain) / cost[n]
                    if speed > best[0]:
                        best = (speed, main, width + 1, n)
        return best

    def choose(self, options: Sequence[Option]) -> tuple[Option | None, int]:
        option, k = self._choose(options)
        if option is None or (k == 0 and option.width == 1):
            self._start_round("none", 0, 0)
        else:
            extra = option.nodes - k if option.width > 1 else 0
            self._start_round(option.source, k, option.behind, extra)
        return option, k

    def _start_round(self, source: str, k: int, behind: int, extra: int = 0) -> None:
        now = perf_counter()
        self._close_round(now)
        self._pending = (source, self.costs.round_s(source, k, behind, extra), now, behind)

    def _close_round(self, now: float) -> None:
        """The previous round's whole time is known now: check the prediction, learn."""
        if self._pending is not None:
            source, predicted, started, behind = self._pending
            round_ = self._finished
            if round_ is not None and source == "model" and round_.tree is None:
                # The draft stopped itself: the prediction is of the round that ran.
                predicted = self._model_round_s(round_.drafted) + self.costs.prefill_s(
                    source, behind
                )
            self.costs.accuracy.add(source, predicted, now - started)
            if round_ is not None and self.learn:
                drafted = round_.drafter if round_.drafted else "none"
                self.costs.observe(round_, drafted, now - started, behind)
        self._pending = None
        self._finished = None

    def end(self) -> None:
        self._close_round(perf_counter())

    def _choose(self, options: Sequence[Option]) -> tuple[Option | None, int]:
        self._last = self._shadow = None
        # The fastest option; on a tie, the more tokens, then the first offered (n-gram).
        chosen: Option | None = None
        speed, k = 1.0, 0
        for option in options:
            option_speed, option_k, shaped = self._best(option)
            if (option_speed, option_k) > (speed, k):
                chosen, speed, k = shaped, option_speed, option_k
        probe = chosen is None
        if chosen is None:
            chosen = self._probe(options)
            if chosen is None:
                guesses = ((bucket(o), o.next) for o in options if o.next is not None)
                self._shadow = next(guesses, None)
                return None, 0
            k, speed = min(PROBE_K, self.k_max, chosen.available), 0.0
        self.state.idle_rounds = 0
        key = bucket(chosen)
        if key != self.state.last_source:
            self.state.switches += self.state.last_source != "none"
            self.state.last_source = key
        self._model_k, self._probing = k, probe
        self._last = (key, probe, chosen.source == "model" and chosen.behind > CATCH_UP)
        return chosen, k

    def _probe(self, options: Sequence[Option]) -> Option | None:
        """After a while without speculation, a one-token draft, so that a change in the text
        (say, the answer starts copying code from the prompt) is noticed."""
        self.state.idle_rounds += 1
        strong = [o for o in options if o.source == "ngram" and o.match >= PROBE_MIN_MATCH]
        waited = PROBE_BUDGET * self.state.idle_rounds * self.costs.plain_s
        model = [
            o
            for o in options
            if o.source == "model"
            and self.costs.round_s("model", PROBE_K, o.behind) - self.costs.plain_s <= waited
        ]
        if self.state.idle_rounds < self.state.probe_after or not (strong or model):
            return None
        self.state.probes += 1
        return (strong or model)[0]

    def observe(self, round_: RoundEvent) -> None:
        # Costs are learned at the next round's start, when this round's whole time is known.
        self._finished = round_
        shadow, self._shadow = self._shadow, None
        if shadow is not None and not round_.drafted and round_.target_token is not None:
            key, guess = shadow
            hit = float(round_.target_token == guess)
            self.state.alpha[key] = _moved(self.state.alpha[key], hit, SHADOW_WEIGHT)
        if self._last is None:
            return
        key, probe, fresh = self._last
        self._last = None
        if probe:
            failed = round_.accepted < round_.drafted
            wait = min(self.state.probe_after * 2, PROBE_MAX) if failed else PROBE_AFTER
            self.state.probe_after = wait
        drafted, accepted = round_.drafted, round_.accepted
        tree = round_.tree
        if tree is not None:  # the main chain's acceptance; the branches teach the fork rate
            drafted, accepted = tree.main_drafted, tree.main_accepted
            if tree.offered:
                rates = self.state.fork_hit
                rates[round_.drafter] = _moved(rates[round_.drafter], float(tree.taken))
        if fresh:
            # The draft model's first draft after reading new context (an answer's first
            # tokens, mostly): on the F16 pair its first token missed in 3 of 4 answers
            # (benchmarks/heavy/dev.jsonl) where later drafts were accepted at 90-100 %, and
            # that one miss, learned, priced the model below plain decoding for the rest of
            # the answer on 4 of 6 held-out prompts. It says little about the drafts after it.
            return
        if round_.drafter == "model" and drafted:
            chances = self._cumulative[:drafted]
            confidences = [
                b / a if a > 0 else 0.0 for a, b in zip([1.0, *chances], chances, strict=False)
            ]
            self.state.confidence.judge(confidences, accepted)
        alpha = self.state.alpha[key]
        for _ in range(accepted):
            alpha = _moved(alpha, 1.0)
        if accepted < drafted:
            alpha = _moved(alpha, 0.0)
        self.state.alpha[key] = alpha


def tree_showcase(costs: CostModel, alpha: float, width: int) -> tuple[Option, float, float]:
    """What `auto` would do with a typical lookup: a long match whose main chain is accepted
    at `alpha`, with other continuations seen at its first three positions. The option chosen
    (a tree when width > 1), its expected speed, and the best chain's."""
    policy = AdaptiveDraftLength(costs, tree_width=width)
    policy.state.alpha = {key: alpha for key in policy.state.alpha}
    offer = Option(NoDrafter(), "ngram", K_MAX, True, match=LONG_MATCH, forks=(0, 1, 2))
    speed, _, chosen = policy._best(offer)
    chain_speed = policy._best(replace(offer, forks=()))[0]
    return chosen, speed, chain_speed


def leaves_showcase(costs: CostModel, alpha: float, width: int) -> tuple[int, float, float]:
    """What `auto` would do with the draft model accepted at `alpha`: how many of its second
    choices it verifies as leaves beside its chain (0: none pay), the expected speed, and the
    chain's alone."""

    def best(leaves_allowed: int) -> tuple[float, int, Option]:
        policy = AdaptiveDraftLength(costs, tree_width=leaves_allowed)
        policy.state.alpha["model"] = alpha
        return policy._best(Option(NoDrafter(), "model", K_MAX, False))

    speed, _, chosen = best(width)
    return chosen.width - 1, speed, best(1)[0]
