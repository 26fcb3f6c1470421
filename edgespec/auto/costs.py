"""Round costs learned where they are paid: the calibration is the prior, every round that
runs is evidence.

A round of `auto` costs, in seconds,

    draft(source, K) + verify(K + 1) + rest

- verify(n): the calibration's T(1) * tau(n), times the ratio measured / calibrated: the
  rounds at this n, shrunk towards the ratio over all rounds (a link to RPC servers, a busier
  or hotter machine changes every n alike; a kernel shape the calibration missed, one n).
- draft(source, K) = a + b * K for each kind of draft, fitted to the rounds that ran: for the
  draft model, a holds the catch-up decodes and b a step with its sampling; for lookups both
  are the lookup itself. Their priors come from the calibration (c, the draft's batch
  costs) and the fixed per-round overhead.
- rest: what the loop spends between rounds (emitting tokens, the policy itself).

Each estimate starts from its prior, worth `prior_weight` observations, and then follows the
observations, forgetting the oldest (`horizon`): the costs of this device in this session.
A draft model's catch-up after a round of its own (the accepted tokens and the target's) is
part of its per-round cost; beyond `catch_up` tokens (after lookup rounds, or a new prompt) it
is a prefill, priced per token from the calibration's batch cost and spread over the tokens
still to come (at most `amortize_tokens`), since it is paid once for the rounds after it.
"""

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
    """What other sequences put in the pass a round shares (a server's slots): their tokens,
    and how many they are (each gets at least one token from it)."""

    tokens: int = 0
    seqs: int = 0


ALONE = Load()


class Mean:
    """A running mean that starts at a prior worth `weight` observations."""

    def __init__(self, prior: float, weight: float, horizon: float) -> None:
        self.value = prior
        self.weight = weight
        self.horizon = horizon  # how many recent observations it follows

    def add(self, x: float) -> None:
        self.weight = min(self.weight + 1.0, self.horizon)
        self.value += (x - self.value) / self.weight


class Line:
    """y = a + b * x by least squares over recent observations, the prior line counting as
    `weight` observations spread over x = 1 and x = 4."""

    def __init__(self, a: float, b: float, weight: float, horizon: float) -> None:
        self.horizon = horizon  # how many recent observations it follows
        self._s = [0.0] * 5  # sums of w, w*x, w*y, w*x*x, w*x*y
        for x in (1.0, 4.0):
            self._add(x, a + b * x, weight / 2)

    def _add(self, x: float, y: float, w: float) -> None:
        for i, v in enumerate((1.0, x, y, x * x, x * y)):
            self._s[i] += w * v

    def add(self, x: float, y: float) -> None:
        if self._s[0] >= self.horizon:  # forget: every older observation loses a little weight
            self._s = [v * (1.0 - 1.0 / self.horizon) for v in self._s]
        self._add(x, y, 1.0)

    def fit(self) -> tuple[float, float] | None:
        """(a, b); None where the x seen are too close together for a slope (then y's mean)."""
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
    """Predicted against measured round time, per drafter (relative errors)."""

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
    """Seconds per round part for the policy; `prior` is the calibration in target steps."""

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
        self.learn = learn  # whether rounds are evidence (else the calibration alone decides)
        # Reading one token in a long batch, for the draft model: its largest batch measured.
        batches = draft_tau or {1: 1.0}
        long = max(batches)
        self.prefill_token_s = prior.c * step_s * (batches[long] / long if long > 4 else 1.0)
        weight, horizon = config.prior_weight, config.horizon
        self.scale = Mean(1.0, weight, horizon)  # measured / calibrated, over every round
        self.per_n: dict[int, Mean] = {}  # n: the ratio in recent rounds at n (no prior)
        overhead = prior.overhead * step_s
        d = prior.c * step_s
        # Catch-up after a round: the draft decodes the accepted tokens and the target's (2 on
        # average), at the batch cost the calibration measured when it did.
        catch_up = d * (draft_tau or {}).get(2, 2.0)
        self.draft = {
            DraftKind.MODEL: Line(catch_up, d, weight, horizon),
            DraftKind.LOOKUP: Line(overhead * config.lookup_share, 0.0, weight, horizon),
        }
        self.rest = Mean(overhead, weight, horizon)
        self.accuracy = Accuracy(config.errors_kept)

    # --- what a round is expected to cost -------------------------------------------------

    def _ratio(self, n: int) -> float:
        seen = self.per_n.get(n)
        if seen is None:
            return self.scale.value
        prior = self.config.per_n_weight
        return (prior * self.scale.value + seen.value * seen.weight) / (prior + seen.weight)

    def verify_s(self, n: int, load: Load = ALONE) -> float:
        """Verifying n tokens: T(1) * tau(n), or in a pass that carries `load.tokens` of other
        sequences, the pass at its total size."""
        total = load.tokens + n
        return self.step_s * self.prior.tau(total) * self._ratio(total)

    def draft_s(self, kind: DraftKind | None, k: int) -> float:
        line = self.draft.get(kind) if kind is not None else None
        return 0.0 if line is None or k <= 0 else line.at(k)

    def prefill_s(self, kind: DraftKind | None, behind: int) -> float:
        """What the draft model pays to read `behind` context tokens beyond a catch-up."""
        if kind is not DraftKind.MODEL:
            return 0.0
        return self.prefill_token_s * max(0, behind - self.config.catch_up)

    def round_s(
        self, kind: DraftKind | None, k: int, behind: int = 0, extra: int = 0, load: Load = ALONE
    ) -> float:
        """A round that drafts k tokens (None: a plain step) and verifies them with `extra`
        more (a tree's nodes beyond its main chain)."""
        return (
            self.draft_s(kind, k)
            + self.prefill_s(kind, behind)
            + self.verify_s(k + 1 + extra, load)
            + self.rest.value
        )

    def plain_s(self, load: Load = ALONE) -> float:
        return self.round_s(None, 0, load=load)

    def steps(self, kind: DraftKind | None, k: int, load: Load = ALONE) -> float:
        """A round that drafts k tokens, in plain steps."""
        return self.round_s(kind, k, load=load) / self.plain_s(load)

    def model_round_s(self, drafted: int, load: Load = ALONE) -> float:
        """A round of the draft model that drafts `drafted` tokens (its catch-up included,
        paid whatever it drafts)."""
        return (
            self.draft[DraftKind.MODEL].at(drafted)
            + self.verify_s(drafted + 1, load)
            + self.rest.value
        )

    def model_round_prices(self, last: int) -> list[float]:
        """`model_round_s` of 0 to `last` drafted tokens as the costs stand now, in one go (a
        round's stop rule weighs them all): what every length shares (the draft's fitted line,
        the rest, the verification ratio of the lengths not seen apart) is looked up once and
        the rest is one comprehension, each price the same float64 operations in the same
        order, so the same number (a function call per length was most of the stop rule's
        time). Priced as a pass of this sequence's tokens alone: where other sequences share
        the pass (`others`), `model_round_s` prices it at its total size and these do not, as
        the per-length pricer before them did not."""
        fit = self.draft[DraftKind.MODEL].fit()
        rest, step, tau = self.rest.value, self.step_s, self.prior.tau
        ratios = [self.scale.value] * (last + 2)
        for n in self.per_n:
            if n <= last + 1:
                ratios[n] = self._ratio(n)
        verify = [step * tau(n) * ratios[n] for n in range(1, last + 2)]
        if fit is None:
            flat = self.draft[DraftKind.MODEL].at(0)
            return [flat + v + rest for v in verify]
        a, b = fit
        return [max(0.0, a + b * d) + v + rest for d, v in enumerate(verify)]

    def relative_speed(self, tokens: float, seconds: float, load: Load = ALONE) -> float:
        """`tokens` in `seconds` against plain decoding's one token a plain step."""
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
        """Tokens per second relative to plain decoding, the draft's prefill of `behind` tokens
        spread over the `left` tokens still to come (at most `amortize_tokens`)."""
        tokens = expected_tokens(alpha, k)
        share = tokens / max(1, min(left, self.config.amortize_tokens)) if left else 1.0
        cost = self.round_s(kind, k, load=load) + self.prefill_s(kind, behind) * min(1.0, share)
        # In a shared pass a longer draft slows every sequence in it: what counts is the pass's
        # tokens per second (the others' counted at one each) against with a plain step here.
        # Alone this is the round's own speed; on a flat curve drafting stays nearly free, on
        # a steep one it pays less the fuller the pass already is.
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
        """The K (among those whose verification was measured) with the highest speed."""
        best = (0, 1.0)
        for k in self.prior.choices(limit):
            s = self.speed(kind, k, alpha, behind, left, load)
            if s > best[1] + 1e-12:
                best = (k, s)
        return best

    # --- evidence -----------------------------------------------------------------------------

    def observe(
        self,
        round_: RoundEvent,
        kind: DraftKind | None,
        between_s: float | None,
        behind: int = 0,
        load: Load = ALONE,
    ) -> None:
        """One round's timings, of a draft of `kind` (None: a plain step); `between_s` is the
        whole time from this round's start to the next one's (None when unknown); `behind`,
        what the draft model had to read first."""
        n = round_.drafted + 1
        clip = self.config.clip
        if round_.verify_s > 0:
            total = load.tokens + n  # a shared pass is timed whole
            now = self._ratio(total)
            ratio = round_.verify_s / (self.step_s * self.prior.tau(total))
            ratio = min(max(ratio, now / clip), now * clip)
            self.scale.add(ratio)
            self.per_n.setdefault(total, Mean(0.0, 0.0, self.config.horizon)).add(ratio)
        drafting = round_.draft_s - self.prefill_s(kind, behind)
        # A tree's draft steps are its main chain's: other nodes come from what scored it.
        drafted = round_.drafted if round_.tree is None else round_.tree.main_drafted
        # A round that read a prefill first teaches nothing about a draft step: what is left
        # after its estimate is mostly that estimate's error.
        line = self.draft.get(kind) if kind is not None else None
        if drafted and line is not None and drafting > 0 and behind <= self.config.catch_up:
            line.add(float(drafted), drafting)
        if between_s is not None:
            drafting = round_.draft_s if line is not None else 0.0
            rest = between_s - drafting - round_.verify_s
            if rest > 0:
                self.rest.add(min(rest, clip * max(self.rest.value, 1e-4)))
