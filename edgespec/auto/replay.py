"""`auto` replayed on recorded outputs: the rounds it would run, charged by a device's tau.

A recorded output stands in for the target (`Recorded`: its greedy token after the recorded
text is the recorded next token), and the draft model's recorded two likeliest tokens for the
draft (`RecordedDraft`), so the drafts, the rounds and the K chosen are exactly those `auto`
would run (greedy output does not depend on the drafts); a round that verifies n tokens is
charged tau(n) target steps. scripts/replay_policy.py collects the outputs and reports on them;
the experiments under benchmarks/ replay `auto` and variants of it through this module.

What an experiment may change, without touching `auto`'s objects: the `AutoConfig` (`config`),
the acceptance state a replay starts from (`state`: for instance one learned on an earlier
text), and what stands between the policy and the engine (`watch`: a `DraftLength` wrapping the
policy, an oracle that reads the recorded output ahead). What it may watch: every round, with
the policy's choice, its event and the target steps it was charged (`Replay.rounds`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from edgespec.auto.config import AUTO, AutoConfig
from edgespec.auto.policy import AdaptiveDraftLength, AdaptiveState
from edgespec.auto.prior import CostModel
from edgespec.auto.start import AutoSettings, Learned, start
from edgespec.engine.drafters import Choice, ModelDrafter, Proposal
from edgespec.engine.events import RoundEvent, TokenEvent
from edgespec.engine.generate import DraftLength, GenerationConfig, Session
from edgespec.options import TREE_WIDTH


class Recorded:
    """A target whose greedy token after the recorded text is the recorded next token (and an
    end of generation anywhere else); it verifies tree drafts when `tree_width` > 1."""

    def __init__(self, text: list[int], n_vocab: int, tree_width: int = 1) -> None:
        self.text, self.n_vocab, self.n_ctx = text, n_vocab, len(text) + 64
        self.tree_width = tree_width
        self.tokens: list[int] = []
        self._tree: list[list[int]] | None = None  # a pending tree's paths, by row

    @property
    def n_past(self) -> int:
        return len(self.tokens) + (self._tree is not None)

    def _rows(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        rows = np.zeros((len(contexts), self.n_vocab), dtype=np.float32)
        for row, seen in zip(rows, contexts, strict=True):
            on_track = len(seen) < len(self.text) and list(seen) == self.text[: len(seen)]
            row[self.text[len(seen)] if on_track else self.n_vocab - 1] = 1.0
        return rows

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.tokens.extend(tokens)
        ends = range(len(self.tokens) - n_logits + 1, len(self.tokens) + 1)
        return self._rows([self.tokens[:end] for end in ends])

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        paths: list[list[int]] = []
        for token, parent in zip(tokens, parents, strict=True):
            paths.append([*(paths[parent] if parent >= 0 else []), token])
        self._tree = paths
        return self._rows([self.tokens + path for path in paths])

    def keep_path(self, rows: Sequence[int]) -> None:
        assert self._tree is not None
        self.tokens.extend(self._tree[rows[-1]])
        self._tree = None

    def rewind(self, n_past: int) -> None:
        self._tree = None
        del self.tokens[n_past:]

    def is_eog(self, token: int) -> bool:
        return token == self.n_vocab - 1

    def token_bytes(self, token: int) -> bytes:
        return b"x"


class RecordedDraft:
    """A draft model that, on the recorded text, scores its recorded two likeliest tokens (the
    rest of the probability spread thinly over the others). After a token the text does not
    hold it goes on as the real draft did after its miss there (`off`, `--collect-off`: its
    confidence in each of the next tokens it drafted, which the target never takes), and past
    that it has no idea (a confidence near 0). Without `off`, "no idea" starts at the miss:
    every chain then stops right after its first wrong token at no cost, which flatters rules
    that draft unsure tokens (benchmarks/HISTORY.md, the draft after a miss)."""

    def __init__(
        self,
        text: list[int],
        start: int,
        rows: list[list[float]],
        n_vocab: int,
        tau: CostModel,
        off: dict[str, list[float]] | None = None,
    ) -> None:
        self.text, self.start, self.rows = text, start, rows
        self.n_vocab, self.n_ctx = n_vocab, len(text) + 64
        self.tau = tau  # what a batch of n costs, in draft steps
        self.off = off or {}  # position of a miss in the output -> the confidences after it
        self.tokens: list[int] = []
        self.steps = 0.0  # draft steps so far

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def _row(self, seen: list[int]) -> np.ndarray:
        at = len(seen) - self.start
        if seen != self.text[: len(seen)]:
            return self._off_row(seen)
        if not 0 <= at < len(self.rows):
            return self._no_idea()  # off the record
        first, second, p1, p2 = self.rows[at]
        p1, p2 = max(p1, 1e-6), max(p2, 1e-6)  # recorded to 4 decimals
        rest = min(p2 / 2, max(1.0 - p1 - p2, 1e-12) / max(self.n_vocab - 2, 1))
        row = np.full(self.n_vocab, math.log(rest), dtype=np.float32)
        row[int(first)], row[int(second)] = math.log(p1), math.log(p2)
        return row

    def _off_row(self, seen: list[int]) -> np.ndarray:
        """After the text was left: the recorded confidence of the draft's next token there,
        given to a token the recorded target never takes mid-text (its end of generation)."""
        pairs = enumerate(zip(seen, self.text, strict=False))
        left = next((i for i, (a, b) in pairs if a != b), len(self.text))
        after = self.off.get(str(left - self.start), [])
        depth = len(seen) - left - 1
        if not 0 <= depth < len(after):
            return self._no_idea()
        return self._beside_text(min(max(after[depth], 1e-6), 1.0 - 1e-6))

    def _no_idea(self) -> np.ndarray:
        """Where nothing was recorded: a confidence near 0, on a token the text never holds."""
        return self._beside_text(2.0 / self.n_vocab)

    def _beside_text(self, p: float) -> np.ndarray:
        """A row whose first choice, at confidence `p`, and second choice are the two ids the
        text never holds (`recorded_run`): neither is ever the target's token, as the real
        draft's were not there. Were the second an arbitrary id of the evenly spread rest, a
        tree leaf could, rarely, be the text's token and be accepted."""
        rest = (1.0 - p) / (self.n_vocab - 0.5)  # the second choice has 1.5 of it
        row = np.full(self.n_vocab, math.log(rest), dtype=np.float32)
        row[self.n_vocab - 2] = math.log(rest * 1.5)
        row[self.n_vocab - 1] = math.log(p)
        return row

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.steps += self.tau.tau(len(tokens))
        self.tokens.extend(tokens)
        ends = range(len(self.tokens) - n_logits + 1, len(self.tokens) + 1)
        return np.stack([self._row(self.tokens[:end]) for end in ends])

    def rewind(self, n_past: int) -> None:
        del self.tokens[n_past:]


class RecordedRun(NamedTuple):
    """A run in a small vocabulary (the ids it uses), with the recorded target and draft that
    replay it."""

    history: list[list[int]]
    prompt: list[int]
    out: list[int]
    hints: list[tuple[list[int], list[int]]]
    target: Recorded
    draft: RecordedDraft


def recorded_run(
    run: dict[str, Any], draft_tau: dict[int, float], tree_width: int = TREE_WIDTH
) -> RecordedRun:
    """`run` in its own small vocabulary, the target verifying trees of up to `tree_width`
    leaves and the draft's batches costing `draft_tau`."""
    ids: dict[int, int] = {}

    def small(tokens: Sequence[int]) -> list[int]:
        return [ids.setdefault(int(t), len(ids)) for t in tokens]

    history = [small(doc) for doc in run.get("history", [])]
    prompt, out = small(run["prompt"]), small(run["out"])
    rows = [[*small([a, b]), p1, p2] for a, b, p1, p2 in run.get("draft", [])]
    hints = [(small(old), small(new)) for old, new in run.get("hints", [])]
    n_vocab = len(ids) + 2  # two ids the text never holds: the draft's choices off it
    draft = RecordedDraft(
        prompt + out, len(prompt), rows, n_vocab, CostModel(draft_tau, 0), run.get("off")
    )
    target = Recorded(prompt + out, n_vocab, tree_width)
    return RecordedRun(history, prompt, out, hints, target, draft)


# What stands between auto's policy and the engine in a replay: the policy and the recorded
# target (whose text an oracle may read ahead) in, the policy the engine asks out.
Watch = Callable[[AdaptiveDraftLength, Recorded], DraftLength]


@dataclass(frozen=True, kw_only=True)
class ReplayedRound:
    """One round of a replay: the policy's choice (None: a plain step), the engine's event, the
    tokens of the output before it, and the target steps it was charged (its verification and
    the draft model's steps since the round before)."""

    choice: Choice | None
    event: RoundEvent
    at: int
    steps: float


class _Told:
    """The policy the engine asks: `asked`'s choices, each kept until its round's event comes
    (the engine hands the policy its choice back just before it yields the round)."""

    def __init__(self, asked: DraftLength) -> None:
        self.asked = asked
        self.told: Choice | None = None

    def choose(self, proposals: Sequence[Proposal]) -> Choice | None:
        return self.asked.choose(proposals)

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        self.told = choice
        self.asked.observe(choice, round_, seconds)


class Replay:
    """`auto`'s generation on one recorded run, as a user's request would start it: chains only
    or trees of up to `tree_width` leaves; with `c` (a draft step in target steps) the recorded
    draft model on offer too, its batches costing `draft_tau` (the target's tau when not
    given); `config`, `state` and `watch` as the module says. Nothing runs until `rounds` or
    `speed` is called, once."""

    def __init__(
        self,
        run: dict[str, Any],
        tau: dict[int, float],
        *,
        tree_width: int = 1,
        c: float | None = None,
        draft_tau: dict[int, float] | None = None,
        config: AutoConfig = AUTO,
        state: AdaptiveState | None = None,
        watch: Watch | None = None,
    ) -> None:
        draft_tau = draft_tau or tau
        self.recorded = recorded_run(run, draft_tau, tree_width)
        self.c = c or 0.0
        self.costs = CostModel(tau, self.c)
        model = ModelDrafter(self.recorded.draft) if c is not None else None
        past = self.recorded.history
        learned = Learned.begin(self.costs, draft_tau=draft_tau, past=past, config=config)
        if state is not None:
            learned = replace(learned, state=state)
        hints = tuple((tuple(old), tuple(new)) for old, new in self.recorded.hints)
        settings = AutoSettings(tree_width=tree_width, hints=hints)
        self._drafter, self.policy = start(settings, learned, model=model)
        asked = watch(self.policy, self.recorded.target) if watch is not None else self.policy
        self._told = _Told(asked)

    def rounds(self) -> Iterator[ReplayedRound]:
        """Runs the generation, round by round; raises if it leaves the recorded output."""
        recorded = self.recorded
        generation = GenerationConfig(max_tokens=len(recorded.out))
        session = Session(recorded.target)
        events = session.generate(recorded.prompt, self._drafter, generation, self._told)
        generated: list[int] = []
        at, drafting = 0, 0.0
        for event in events:
            if isinstance(event, TokenEvent):
                generated.append(event.token)
            elif isinstance(event, RoundEvent):  # costs.tau: a model draft may stop anywhere
                draft_steps = recorded.draft.steps - drafting
                steps = self.costs.tau(event.drafted + 1) + self.c * draft_steps
                drafting = recorded.draft.steps
                yield ReplayedRound(choice=self._told.told, event=event, at=at, steps=steps)
                at = len(generated)
        if generated != recorded.out:  # greedy output does not depend on the drafts
            raise AssertionError("the replay left the recorded output")

    def speed(self) -> float:
        """Tokens per target step (plain decoding: 1)."""
        steps = sum(r.steps for r in self.rounds())
        return len(self.recorded.out) / steps


def replay(
    run: dict[str, Any],
    tau: dict[int, float],
    tree_width: int = 1,
    c: float | None = None,
    draft_tau: dict[int, float] | None = None,
    config: AutoConfig = AUTO,
    watch: Watch | None = None,
) -> float:
    """Tokens per target step (plain decoding: 1) of `auto` on one output (`Replay`'s)."""
    r = Replay(
        run, tau, tree_width=tree_width, c=c, draft_tau=draft_tau, config=config, watch=watch
    )
    return r.speed()


def common(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens `a` and `b` hold alike from their start."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def load_tau(calibration: Path) -> dict[int, float]:
    """A calibration file's tau (what `edgespec plan` caches): verifying n tokens costs tau[n]
    target steps."""
    return {int(n): float(v) for n, v in json.loads(calibration.read_text())["tau"].items()}


def policy_config(settings: Sequence[str]) -> AutoConfig:
    """AUTO with the `NAME=VALUE` settings of its `PolicyConfig` (each value of its field's
    type)."""
    policy = AUTO.policy
    for setting in settings:
        name, _, value = setting.partition("=")
        kind = type(getattr(policy, name))
        policy = replace(policy, **{name: kind(value)})
    return replace(AUTO, policy=policy)


def geo_mean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))
