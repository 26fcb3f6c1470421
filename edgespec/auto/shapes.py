"""The fastest way to draft a proposal at the learned costs: a chain of K tokens, or a tree."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from edgespec.auto.costs import LearnedCosts, Load
from edgespec.auto.learning import AdaptiveState
from edgespec.auto.prior import expected_tokens
from edgespec.engine.drafters import DraftKind, Lookup


@dataclass(frozen=True)
class Shape:
    """K tokens in the main chain; as a tree, `width` leaves and `nodes` tokens in all."""

    k: int
    width: int = 1
    nodes: int = 0


@dataclass(frozen=True)
class Shapes:
    """Speeds against plain decoding, in a pass that carries `load`."""

    costs: LearnedCosts
    load: Load
    state: AdaptiveState
    k_max: int
    tree_width: int

    def lookup(self, lookup: Lookup, alpha: float, k_max: int) -> tuple[float, Shape]:
        limit = min(k_max, lookup.available)
        speed, k = 1.0, 0
        if limit > 0:
            k, speed = self.costs.best_k(
                DraftKind.LOOKUP, alpha, limit, 0, lookup.available, self.load
            )
        if lookup.forks and self.tree_width > 1:
            tree_speed, tree = self._tree(lookup, k, k_max, alpha, speed)
            if tree_speed > speed + 1e-12:
                return tree_speed, tree
        return speed, Shape(k)

    def model(self, available: int, behind: int, alpha: float) -> tuple[float, Shape]:
        costs = self.costs
        limit = min(self.k_max, available)
        speed, k = 1.0, 0
        if limit > 0:
            k, speed = costs.best_k(DraftKind.MODEL, alpha, limit, behind, available, self.load)
        learned = self.state.model_rounds
        if limit > 0 and learned is not None:
            # The rounds say more than a rate pulled down by the unsure tokens it never drafts.
            spread = learned.tokens / max(1, min(available, costs.config.amortize_tokens))
            prefill = costs.prefill_s(DraftKind.MODEL, behind) * min(1.0, spread)
            speed = costs.relative_speed(learned.tokens, learned.seconds + prefill, self.load)
            k = max(k, 1) if speed > 1.0 else 0
        if k > 0 and self.tree_width > 1:
            leaves, leaf_speed = self._leaves(behind, k, alpha)
            if leaf_speed > speed + 1e-12:
                return leaf_speed, Shape(k, leaves + 1, k + leaves)
        return speed, Shape(k)

    def _leaves(self, behind: int, k: int, alpha: float) -> tuple[int, float]:
        """How many of the draft's second choices to verify as leaves, and that speed."""
        hit = self.state.fork_hit[DraftKind.MODEL]
        chain = expected_tokens(alpha, k)
        best = (0, 0.0)
        for leaves in range(1, min(self.tree_width - 1, k) + 1):
            if k + 1 + leaves not in self.costs.prior.tau_points:
                continue
            gain = hit * sum(alpha**d * (1.0 - alpha) for d in range(leaves))
            cost = self.costs.round_s(DraftKind.MODEL, k, behind, leaves, self.load)
            speed = self.costs.relative_speed(chain + gain, cost, self.load)
            if speed > best[1]:
                best = (leaves, speed)
        return best

    def _tree(
        self, lookup: Lookup, k: int, k_max: int, alpha: float, chain_speed: float
    ) -> tuple[float, Shape]:
        """The best tree (speed 0: none beats the chain); hopeless ones are never costed."""
        offered = lookup.forks[: self.tree_width - 1]
        best = (0.0, Shape(k, 1, k))
        branch_max = self.state.config.branch_max
        sizes = self.costs.prior.choices(k_max)
        cost = {n: self.costs.steps(DraftKind.LOOKUP, n, self.load) for n in sizes}
        later = list(itertools.accumulate((cost[n] for n in reversed(sizes)), min))
        cheapest = dict(zip(reversed(sizes), later, strict=True))
        tail = [expected_tokens(alpha, length - 1) for length in range(branch_max + 1)]
        for main in {k, k // 2, min(max(offered) + 1, lookup.available, k_max)}:
            forks = [d for d in offered if d < main or d == main == lookup.available]
            # A branch pays where the chain misses (or ends) at its fork; a second there, half.
            reach = [
                alpha**d
                * ((1.0 - alpha) if d < main else 1.0)
                * self.state.fork_hit[DraftKind.LOOKUP]
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
                    if n - main > width * branch_max:
                        break
                    share, extra = divmod(n - main, width)
                    gain = sum(reach[i] * tail[share + (i < extra)] for i in range(width))
                    speed = (chain + gain) / cost[n]
                    if speed > best[0]:
                        best = (speed, Shape(main, width + 1, n))
        return best
