"""Round costs learned from the rounds that run, the calibration their prior: a draft (a + b * K
per kind), verifying K + 1 tokens (T(1) * tau(K + 1) * measured / calibrated), the rest."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from edgespec.auto.config import AUTO, CostConfig
from edgespec.auto.prior import CostModel, expected_tokens
from edgespec.engine.drafters import DraftKind
from edgespec.engine.events import RoundEvent


class Load(NamedTuple):
    """Other sequences in a round's pass (a server's slots): their tokens, and how many."""

    tokens: int = 0
    seqs: int = 0


ALONE = Load()


class Mean:
    def __init__(self, prior: float, weight: float, horizon: float) -> None:
        self.value = prior
        self.weight = weight
        self.horizon = horizon

    def add(self, x: float) -> None:
        self.weight = min(self.weight + 1.0, self.horizon)
        self.value += (x - self.value) / self.weight


class Line:
    """y = a + b * x by least squares, the prior worth `weight` observations at x = 1 and 4."""

    def __init__(self, a: float, b: float, weight: float, horizon: float) -> None:
        self.horizon = horizon
        self._s = [0.0] * 5  # w, w*x, w*y, w*x*x, w*x*y
        for x in (1.0, 4.0):
            self._add(x, a + b * x, weight / 2)

    def _add(self, x: float, y: float, w: float) -> None:
        for i, v in enumerate((1.0, x, y, x * x, x * y)):
            self._s[i] += w * v

    def add(self, x: float, y: float) -> None:
        if self._s[0] >= self.horizon:
            self._s = [v * (1.0 - 1.0 / self.horizon) for v in self._s]
        self._add(x, y, 1.0)

    def fit(self) -> tuple[float, float] | None:
        n, sx, sy, sxx, sxy = self._s
        det = n * sxx - sx * sx
        if det <= 1e-12 * n * n:
            return None
        b = max(0.0, (n * sxy - sx * sy) / det)  # a longer draft never costs less
        return (sy - b * sx) / n, b

    def at(self, x: float) -> float:
        fit = self.fit()
        if fit is None:
            return self._s[2] / self._s[0]
        a, b = fit
        return max(0.0, a + b * x)


@dataclass
class Accuracy:
    kept: int = AUTO.costs.errors_kept
    errors: dict[str, deque[float]] = field(default_factory=dict)

    def add(self, source: str, predicted: float, measured: float) -> None:
        if measured > 0:
            kept = self.errors.setdefault(source, deque(maxlen=self.kept))
            kept.append(abs(predicted - measured) / measured)

    def median(self) -> dict[str, float]:
        return {s: statistics.median(e) for s, e in self.errors.items() if e}

    def clear(self) -> None:
        self.errors.clear()


class LearnedCosts:
    """Seconds per round part; `prior`: the calibration, in target steps."""

    def __init__(
        self,
        prior: CostModel,
        step_s: float,
        draft_tau: dict[int, float] | None = None,
        config: CostConfig = AUTO.costs,
        *,
        learn: bool = True,
    ) -> None:
        self.prior = prior
        self.step_s = step_s
        self.config = config
        self.learn = learn
        batches = draft_tau or {1: 1.0}
        long = max(batches)
        self.prefill_token_s = prior.c * step_s * (batches[long] / long if long > 4 else 1.0)
        weight, horizon = config.prior_weight, config.horizon
        self.scale = Mean(1.0, weight, horizon)  # measured / calibrated, over all n
        self.per_n: dict[int, Mean] = {}
        overhead = prior.overhead * step_s
        d = prior.c * step_s
        # A catch-up: the accepted tokens and the target's, 2 on average.
        catch_up = d * (draft_tau or {}).get(2, 2.0)
        self.draft = {
            DraftKind.MODEL: Line(catch_up, d, weight, horizon),
            DraftKind.LOOKUP: Line(overhead * config.lookup_share, 0.0, weight, horizon),
        }
        self.rest = Mean(overhead, weight, horizon)
        self.accuracy = Accuracy(config.errors_kept)

    def _ratio(self, n: int) -> float:
        seen = self.per_n.get(n)
        if seen is None:
            return self.scale.value
        prior = self.config.per_n_weight
        return (prior * self.scale.value + seen.value * seen.weight) / (prior + seen.weight)

    def verify_s(self, n: int, load: Load = ALONE) -> float:
        total = load.tokens + n
        return self.step_s * self.prior.tau(total) * self._ratio(total)

    def draft_s(self, kind: DraftKind | None, k: int) -> float:
        line = self.draft.get(kind) if kind is not None else None
        return 0.0 if line is None or k <= 0 else line.at(k)

    def prefill_s(self, kind: DraftKind | None, behind: int) -> float:
        if kind is not DraftKind.MODEL:
            return 0.0
        return self.prefill_token_s * max(0, behind - self.config.catch_up)

    def round_s(
        self, kind: DraftKind | None, k: int, behind: int = 0, extra: int = 0, load: Load = ALONE
    ) -> float:
        """k tokens drafted (kind None: a plain step), verified with `extra` more (a tree's)."""
        return (
            self.draft_s(kind, k)
            + self.prefill_s(kind, behind)
            + self.verify_s(k + 1 + extra, load)
            + self.rest.value
        )

    def plain_s(self, load: Load = ALONE) -> float:
        return self.round_s(None, 0, load=load)

    def steps(self, kind: DraftKind | None, k: int, load: Load = ALONE) -> float:
        return self.round_s(kind, k, load=load) / self.plain_s(load)

    def model_round_s(self, drafted: int, load: Load = ALONE) -> float:
        return (
            self.draft[DraftKind.MODEL].at(drafted)
            + self.verify_s(drafted + 1, load)
            + self.rest.value
        )

    def model_round_prices(self, last: int, load: Load = ALONE) -> list[float]:
        """`model_round_s` of 0 to `last` tokens at `load` in one go: the same floats."""
        fit = self.draft[DraftKind.MODEL].fit()
        rest, step, tau = self.rest.value, self.step_s, self.prior.tau
        top = load.tokens + last + 1
        ratios = [self.scale.value] * (top + 1)
        for n in self.per_n:
            if n <= top:
                ratios[n] = self._ratio(n)
        verify = [step * tau(n) * ratios[n] for n in range(load.tokens + 1, top + 1)]
        if fit is None:
            flat = self.draft[DraftKind.MODEL].at(0)
            return [flat + v + rest for v in verify]
        a, b = fit
        return [max(0.0, a + b * d) + v + rest for d, v in enumerate(verify)]

    def prompt_chunk(self, others: int) -> int:
        """The most prompt tokens a pass carrying `others` other tokens may add while costing at
        most `prompt_steps` plain steps more (at least one)."""
        allowed = self.config.prompt_steps * self.verify_s(1)
        if others:
            allowed += self.verify_s(others)
        load, n = Load(others), 1
        while n < self.config.prompt_most and self.verify_s(n + 1, load) <= allowed:
            n += 1
        return n

    def relative_speed(self, tokens: float, seconds: float, load: Load = ALONE) -> float:
        return tokens / seconds * self.plain_s(load)

    def speed(
        self,
        kind: DraftKind,
        k: int,
        alpha: float,
        behind: int = 0,
        left: int = 0,
        load: Load = ALONE,
    ) -> float:
        """Speed against plain decoding, a prefill spread over the `left` tokens to come."""
        tokens = expected_tokens(alpha, k)
        share = tokens / max(1, min(left, self.config.amortize_tokens)) if left else 1.0
        cost = self.round_s(kind, k, load=load) + self.prefill_s(kind, behind) * min(1.0, share)
        # A longer draft slows every sequence in a shared pass: the pass's speed counts.
        others = load.seqs
        return (tokens + others) / cost * self.plain_s(load) / (1 + others)

    def best_k(
        self,
        kind: DraftKind,
        alpha: float,
        limit: int,
        behind: int = 0,
        left: int = 0,
        load: Load = ALONE,
    ) -> tuple[int, float]:
        best = (0, 1.0)
        for k in self.prior.choices(limit):
            s = self.speed(kind, k, alpha, behind, left, load)
            if s > best[1] + 1e-12:
                best = (k, s)
        return best

    def observe(
        self,
        round_: RoundEvent,
        kind: DraftKind | None,
        between_s: float | None,
        behind: int = 0,
        load: Load = ALONE,
    ) -> None:
        """A round's timings; `between_s`: from its start to the next one's (None: unknown)."""
        n = round_.drafted + 1
        clip = self.config.clip
        if round_.verify_s > 0:
            total = load.tokens + n
            now = self._ratio(total)
            ratio = round_.verify_s / (self.step_s * self.prior.tau(total))
            ratio = min(max(ratio, now / clip), now * clip)
            self.scale.add(ratio)
            self.per_n.setdefault(total, Mean(0.0, 0.0, self.config.horizon)).add(ratio)
        drafting = round_.draft_s - self.prefill_s(kind, behind)
        drafted = round_.drafted if round_.tree is None else round_.tree.main_drafted
        # After a prefill, what is left of draft_s is mostly the prefill estimate's error.
        line = self.draft.get(kind) if kind is not None else None
        if drafted and line is not None and drafting > 0 and behind <= self.config.catch_up:
            line.add(float(drafted), drafting)
        if between_s is not None:
            drafting = round_.draft_s if line is not None else 0.0
            rest = between_s - drafting - round_.verify_s
            if rest > 0:
                self.rest.add(min(rest, clip * max(self.rest.value, 1e-4)))
