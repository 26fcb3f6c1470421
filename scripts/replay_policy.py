"""Replay `auto`'s n-gram policy on recorded greedy outputs, for any tau table, in seconds.

A change to the policy (a prior, a cap, how fast it learns) can be judged on every built-in
suite and on devices this machine is not: the target is replaced by one whose greedy token is
the recorded one, so the drafts, the rounds and the K chosen are exactly those `auto` would run
(greedy output does not depend on the drafts), and a round that verifies n tokens is charged
tau(n) target steps. The speed reported is tokens / steps, relative to plain decoding's one
step a token: what a run would reach without timing noise, without the learned costs (the
calibration alone decides) and without the draft model.

    python scripts/replay_policy.py --collect outputs.json       # greedy outputs (minutes)
    python scripts/replay_policy.py outputs.json ~/.cache/edgespec/calibration/KEY.json ...

Each calibration file (what `edgespec plan` measured) is one tau table; `--flat` adds a GPU-like
one (tau(n) = 1 + 0.02 (n - 1)). Every suite is replayed with chains only and with tree drafts
allowed (the target then verifies trees of up to 4 leaves, as llama.cpp's does).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.engine.drafters import EitherDrafter
from edgespec.engine.events import RoundEvent, TokenEvent
from edgespec.engine.generate import GenerationConfig, Session
from edgespec.engine.suffix import SuffixDrafter
from edgespec.options import TREE_WIDTH
from edgespec.planner.adaptive import AdaptiveDraftLength
from edgespec.planner.calibrate import TAU_POINTS
from edgespec.planner.costs import CostModel

SUITES = ("code_generation", "code_editing", "summarization", "chat", "multi_turn_editing")
SESSION_TOKENS = 512  # a turn of an editing session rewrites a whole file


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


def replay(run: dict[str, Any], tau: dict[int, float], tree_width: int = 1) -> float:
    """Tokens per target step (plain decoding: 1) of auto's n-gram policy on one output; with
    `tree_width` > 1 it may verify tree drafts of as many leaves."""
    ids: dict[int, int] = {}  # a small vocabulary: the tokens this run uses
    history = [[ids.setdefault(t, len(ids)) for t in doc] for doc in run["history"]]
    prompt = [ids.setdefault(t, len(ids)) for t in run["prompt"]]
    out = [ids.setdefault(t, len(ids)) for t in run["out"]]
    suffix = SuffixDrafter()
    suffix.remember(history)
    policy = AdaptiveDraftLength(CostModel(tau, 0.0), tree_width=tree_width)
    events = Session(Recorded(prompt + out, len(ids) + 1, tree_width)).generate(
        prompt, EitherDrafter(suffix), GenerationConfig(max_tokens=len(out)), policy
    )
    steps, generated = 0.0, []
    for event in events:
        if isinstance(event, RoundEvent):
            steps += tau[event.drafted + 1]
        elif isinstance(event, TokenEvent):
            generated.append(event.token)
    if generated != out:  # greedy output does not depend on the drafts
        raise AssertionError("the replay left the recorded output")
    return len(out) / steps


def collect(path: Path, max_tokens: int) -> None:
    from edgespec.api import Speculator
    from edgespec.bench.runner import code_of
    from edgespec.bench.suites import load_suite

    spec = Speculator.load(drafter="none")
    runs = []
    sessions: dict[int, tuple[str, list[list[int]]]] = {}
    for suite in SUITES:
        for p in load_suite(suite):
            history: list[list[int]] = []
            text = p.prompt
            if p.session is not None:
                file, history = sessions.get(p.session, (p.file or "", []))
                text = p.edit_prompt(file)
            prompt = spec.prompt_tokens(text, system=p.system)
            spec.reset()
            limit = p.max_tokens or (SESSION_TOKENS if p.session is not None else max_tokens)
            events = spec.stream(prompt, drafter="none", max_tokens=limit)
            out = [e.token for e in events if isinstance(e, TokenEvent)]
            if p.session is not None:
                answer = code_of(spec.target.detokenize(out))
                sessions[p.session] = (answer, [*history, prompt + out])
            label = suite if p.session is None else f"{suite}, turn {p.turn + 1}"
            runs.append({"suite": label, "prompt": prompt, "out": out, "history": history})
    path.write_text(json.dumps(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outputs", type=Path)
    parser.add_argument("calibrations", type=Path, nargs="*")
    parser.add_argument("--collect", action="store_true", help="write greedy outputs to OUTPUTS")
    parser.add_argument("--max-tokens", type=int, default=256, help="per single-turn prompt")
    parser.add_argument("--flat", action="store_true", help="also a flat, GPU-like tau")
    args = parser.parse_args()
    if args.collect:
        collect(args.outputs, args.max_tokens)
        return
    taus = {str(p): {int(n): v for n, v in json.loads(p.read_text())["tau"].items()}
            for p in args.calibrations}  # fmt: skip
    if args.flat:
        taus["flat"] = {n: 1.0 + 0.02 * (n - 1) for n in TAU_POINTS}
    runs = json.loads(args.outputs.read_text())
    for name, tau in taus.items():
        print(name)
        report(runs, tau)


def _geo(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def report(runs: Sequence[dict[str, Any]], tau: dict[int, float]) -> None:
    """Per suite: chains only, and with tree drafts of up to TREE_WIDTH leaves against them."""
    chains: dict[str, list[float]] = defaultdict(list)
    trees: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        chains[run["suite"]].append(replay(run, tau))
        trees[run["suite"]].append(replay(run, tau, TREE_WIDTH))
    for suite, v in chains.items():
        ratio = [t / c for t, c in zip(trees[suite], v, strict=True)]
        print(
            f"  {suite:30} {_geo(v):.3f}x plain ({min(v):.2f}-{max(v):.2f}); with trees "
            f"{_geo(trees[suite]):.3f}x, trees/chains {min(ratio):.2f}-{max(ratio):.2f}"
        )


if __name__ == "__main__":
    main()
