"""The engine's own cost per generated token, with models whose decode costs nothing.

    PYTHONPATH=. python benchmarks/overhead/overhead.py [--vocab 151936] [--tokens 128]
        [--repeats 7] [--configs none,model,auto] [--json OUT] [--copy-logits]
        [--contexts 100,4000]

A fast device (a 7B target on a recent GPU: 5-10 ms a step) feels every millisecond the engine
spends outside llama.cpp. Here the target and the draft are `InstantModel`s: a decode writes
rows of logits of the real vocabulary's size (151,936: the default pair's) from a small bank of
rows shaped like a language model's (a confident head over a long normal tail), so sampling,
verification and drafting do what they do on the real pair, and the decode itself is left out.
Every configuration (drafter `none`, `model` with K = 4, `auto` with the draft model and trees,
each greedy and at temperature 0.7 / top-p 0.95, with and without a JSON-schema grammar) runs
`--repeats` generations of `--tokens` tokens through the public API (`Speculator.stream`), the
events consumed as the CLI consumes them, interleaved; it reports the median CPU time per
generated token (time.process_time: the shared cores' other work is not counted), less the fake
decodes' own time.

A second, instrumented set of runs splits that time by part (exclusive time: a part nested in
another counts for the inner one): `logits` (rows handed from the model to the engine, as the
llama.cpp adapter hands them), `sampling` (verification: acceptance tests, sampling the target's
token), `drafting` (drafters' lookups, the draft model's Python around its steps, the policy),
`grammar` (masks, the grammar's state) and `other` (the loop, stop strings, UTF-8 streaming,
events, what the consumer does with them). Wrapping costs about a microsecond per call, so the
parts add up to a little more than the plain runs' total.

`--copy-logits`: hand each row over as a copy in fresh memory (as the adapter did before it
handed views of llama.cpp's buffer), for before/after comparisons. The budget these figures are
held to is in this folder's README.

`--contexts 100,4000`: instead of the split by part, the rounds' CPU time per token (from the
first event to the last: reading the prompt, paid once per generation, left out) after prompts
of each length: what a long conversation adds to every round (the issue's third goal: no part
whose cost grows with the context).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import numpy as np

from edgespec.api import Speculator
from edgespec.auto.policy import AdaptiveDraftLength
from edgespec.auto.prior import CostModel
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine import constraint, generate
from edgespec.engine.drafters import (
    EitherDrafter,
    Lookup,
    ModelDrafter,
    ModelProposal,
    NoDrafter,
)
from edgespec.engine.events import DoneEvent, Event, TokenEvent
from edgespec.engine.generate import FixedK
from edgespec.engine.sampling import SamplingParams
from edgespec.text.grammar import Grammar, GrammarConstraint

VOCAB = 151_936  # Qwen2.5's, the default pair's
CLOCK = time.process_time
DRAFTERS = (NoDrafter, EitherDrafter, SuffixDrafter, ModelDrafter)
PARTS = ("logits", "sampling", "drafting", "grammar", "other")
# A fast device: verifying n tokens costs little more than one, a draft step a fifth of a
# target step (auto's choices follow these; the decodes themselves cost nothing here).
FAST_DEVICE = CostModel({1: 1.0, 2: 1.02, 4: 1.05, 8: 1.12, 16: 1.3}, 0.2)
# An answer in a JSON string: the fake model's tokens are random, so a schema of structure would
# end the answer within a few tokens (a real model writes the structure, then text).
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def logit_bank(n_vocab: int, rows: int, seed: int = 0) -> np.ndarray:
    """Rows of logits shaped like the default target's: a normal tail (sd 2.7) under a head of
    64 tokens whose leader stands 4 to 16 above the tail's maximum (16 to 29 above the median),
    the head's steps from steep to flat. At temperature 0.7 / top-p 0.95 the rows keep 1 to 18
    tokens (median 5.5): a little flatter than the real target's answers (median 2, 95th
    percentile 15, most 48 over 199 rows of three answers: `real_rows.py`)."""
    rng = np.random.default_rng(seed)
    bank = rng.normal(0.0, 2.7, size=(rows, n_vocab)).astype(np.float32)
    margins = np.linspace(16.0, 4.0, rows)
    spreads = np.geomspace(3.0, 0.12, rows)
    for r in range(rows):
        head = rng.choice(n_vocab, size=min(64, n_vocab), replace=False)
        steps = np.cumsum(rng.exponential(spreads[r], size=len(head) - 1))
        bank[r, head] = bank[r].max() + margins[r] - np.concatenate([[0.0], steps])
    return bank


def piece(token: int) -> bytes:
    """A token's text: the 256 bytes first, then distinct lowercase words, every other one
    after a space (a byte-level vocabulary's shape)."""
    if token < 256:
        return bytes([token])
    word, n = "", token - 256
    while True:
        word = chr(97 + n % 26) + word
        n = n // 26 - 1
        if n < 0:
            break
    return (" " if token % 2 else "").encode() + word.encode()


class _Tokenizer:
    """What llguidance's TokenizerWrapper asks of a tokenizer: greedy longest match."""

    bos_token_id = None

    def __init__(self, pieces: list[bytes], eos: int) -> None:
        self.tokens = pieces
        self.eos_token_id = eos
        self.special_token_ids = [eos]
        self._ids = {p: i for i, p in enumerate(pieces) if i != eos}
        self._longest = max(len(p) for p in pieces)

    def __call__(self, data: bytes | str) -> list[int]:
        raw = data.encode() if isinstance(data, str) else data
        out, i = [], 0
        while i < len(raw):
            for n in range(min(self._longest, len(raw) - i), 0, -1):
                found = self._ids.get(raw[i : i + n])
                if found is not None:
                    out.append(found)
                    i += n
                    break
        return out


@dataclass
class Parts:
    """Exclusive CPU time per part: time goes to the innermost part running."""

    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    stack: list[str] = field(default_factory=lambda: ["other"])
    mark: float = 0.0

    def enter(self, part: str) -> None:
        now = CLOCK()
        self.totals[self.stack[-1]] += now - self.mark
        self.mark = now
        self.stack.append(part)

    def leave(self) -> None:
        now = CLOCK()
        self.totals[self.stack.pop()] += now - self.mark
        self.mark = now

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.leave()

    def wrap(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.enter(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return timed


class InstantModel:
    """A target or draft model whose decode writes rows from `logit_bank` into a buffer (as
    llama.cpp writes its output buffer; timed apart, as `llama_s`, and left out) and hands them
    over as the llama.cpp adapter does (a view of that buffer, or with `copy_logits` a copy).
    The row at a position depends on the last token and the position; `disagree` of the
    positions get another row (a draft model that is sometimes wrong)."""

    def __init__(
        self,
        bank: np.ndarray,
        n_ctx: int = 16384,
        disagree: float = 0.0,
        copy_logits: bool = False,
        tree_width: int = 1,
    ) -> None:
        self.bank = bank
        self.n_vocab = bank.shape[1]
        self.n_ctx = n_ctx
        self.disagree = disagree
        self.copy_logits = copy_logits
        self.tree_width = tree_width
        self.tokens: list[int] = []
        self._tree: list[tuple[int, ...]] | None = None
        self._buffer = np.empty((0, self.n_vocab), dtype=np.float32)
        self.llama_s = 0.0  # CPU time of the fake decodes themselves
        self.decodes = 0
        self.parts: Parts | None = None
        self.eos = self.n_vocab - 1

    @property
    def n_past(self) -> int:
        return len(self.tokens) + (self._tree is not None)

    def _write(self, contexts: Sequence[tuple[int, int]]) -> np.ndarray:
        """llama.cpp's part: a row per (last token, position) into the output buffer."""
        started = CLOCK()
        if len(self._buffer) < len(contexts):
            self._buffer = np.empty((len(contexts), self.n_vocab), dtype=np.float32)
        n, rows = self.n_vocab, len(self.bank)
        for out, (last, pos) in zip(self._buffer, contexts, strict=False):
            h = (last * 2654435761 + pos * 40503) & 0xFFFFFFFF
            if (h >> 8) % 1000 < self.disagree * 1000:
                h += 1
            r, s = h % rows, (h >> 4) % n
            out[: n - s] = self.bank[r, s:]
            out[n - s :] = self.bank[r, :s]
        self.llama_s += CLOCK() - started
        self.decodes += 1
        return self._buffer[: len(contexts)]

    def _hand_over(self, rows: np.ndarray) -> np.ndarray:
        parts = self.parts
        if parts is not None:
            parts.enter("logits")
        out = np.array(rows, copy=True) if self.copy_logits else rows
        if parts is not None:
            parts.leave()
        return out

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        start = len(self.tokens)
        self.tokens.extend(tokens)
        ends = range(start + len(tokens) - n_logits, start + len(tokens))
        return self._hand_over(self._write([(self.tokens[e], e) for e in ends]))

    def rewind(self, n_past: int) -> None:
        self._tree = None
        del self.tokens[n_past:]

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        paths: list[tuple[int, ...]] = []
        for tok, parent in zip(tokens, parents, strict=True):
            paths.append((*(paths[parent] if parent >= 0 else ()), tok))
        self._tree = paths
        base = len(self.tokens)
        return self._hand_over(self._write([(p[-1], base + len(p) - 1) for p in paths]))

    def keep_path(self, rows: Sequence[int]) -> None:
        assert self._tree is not None
        self.tokens.extend(self._tree[rows[-1]])
        self._tree = None

    def is_eog(self, token: int) -> bool:
        return token == self.eos

    def token_bytes(self, token: int) -> bytes:
        return piece(token)

    @functools.cached_property
    def grammar_tokenizer(self) -> Any:
        import llguidance

        pieces = [piece(t) for t in range(self.n_vocab - 1)] + [b"<eos>"]
        wrapper = llguidance.TokenizerWrapper(_Tokenizer(pieces, self.eos))
        return llguidance.LLTokenizer(wrapper)


@dataclass(frozen=True)
class Config:
    drafter: str  # none, model, auto
    temperature: float
    grammar: bool

    @property
    def name(self) -> str:
        sampling = "greedy" if self.temperature == 0 else f"T={self.temperature}"
        return f"{self.drafter} {sampling}{' json' if self.grammar else ''}"


def configs(drafters: Sequence[str]) -> list[Config]:
    return [Config(d, t, g) for g in (False, True) for t in (0.0, 0.7) for d in drafters]


@dataclass
class Bench:
    """A target, a draft that disagrees with it at a fifth of the positions, and the API."""

    spec: Speculator
    target: InstantModel
    draft: InstantModel

    @classmethod
    def make(cls, n_vocab: int, copy_logits: bool, bank_rows: int = 16) -> Bench:
        bank = logit_bank(n_vocab, bank_rows)
        target = InstantModel(bank, copy_logits=copy_logits, tree_width=4)
        draft = InstantModel(bank, disagree=0.2, copy_logits=copy_logits)
        spec = Speculator(target, draft)
        spec.enable_auto(FAST_DEVICE, use_model=True)
        return cls(spec, target, draft)

    def stream(
        self, config: Config, max_tokens: int, context: int = 64
    ) -> Generator[Event, None, None]:
        """A fresh generation of `config` after a prompt of `context` tokens (seeded at T > 0,
        top-p 0.95; K = 4 for `model`), its events not yet read."""
        self.spec.reset()  # auto starts afresh per generation; its learned costs carry over
        sampling = SamplingParams(temperature=config.temperature, top_p=0.95, seed=7)
        grammar = Grammar.json_schema(SCHEMA) if config.grammar else None
        prompt = [(i * 7919) % (self.target.n_vocab - 1) for i in range(context)]
        k = 4 if config.drafter == "model" else None
        return self.spec.stream(
            prompt,
            max_tokens=max_tokens,
            grammar=grammar,
            drafter=config.drafter,
            sampling=sampling,
            k=k,
        )

    def run(
        self, config: Config, tokens: int, parts: Parts | None = None, context: int = 64
    ) -> dict[str, Any]:
        """One generation after a prompt of `context` tokens, from a fresh cache: CPU seconds
        outside the decodes (all of them, and the rounds' alone: from the first event to the
        last, without reading the prompt), tokens, the draft model's steps, the text."""
        stream = self.stream(config, tokens, context)
        llama = self.target.llama_s + self.draft.llama_s
        steps = self.draft.decodes
        text, generated = [], 0
        started = CLOCK()
        if parts is not None:
            parts.mark = started
        first: tuple[float, float] | None = None  # CPU time and fake decodes' at the first event
        rounds = 0.0
        for event in stream:  # what the CLI does with the events: text out, stats at the end
            if first is None:
                first = (CLOCK(), self.target.llama_s + self.draft.llama_s)
            if isinstance(event, TokenEvent):
                text.append(event.text)
            elif isinstance(event, DoneEvent):
                generated = event.stats.generated
                fake = self.target.llama_s + self.draft.llama_s - first[1]
                rounds = CLOCK() - first[0] - fake
        spent = CLOCK() - started - (self.target.llama_s + self.draft.llama_s - llama)
        steps = self.draft.decodes - steps
        return {
            "s": spent,
            "rounds_s": rounds,
            "tokens": generated,
            "draft_steps": steps,
            "text": "".join(text),
        }


@contextlib.contextmanager
def instrumented(bench: Bench, parts: Parts) -> Iterator[None]:
    """Every part's entry points wrapped, for the time of the block."""
    regions: list[tuple[Any, str, str]] = [
        (generate, "verify_greedy", "sampling"),
        (generate, "verify_sampled", "sampling"),
        (generate, "verify_tree", "sampling"),
        (generate, "verify_constrained", "sampling"),
        (generate, "within_grammar", "grammar"),
        (constraint, "masked", "grammar"),
        *((GrammarConstraint, m, "grammar") for m in ("allows", "valid_prefix", "mask")),
        *((GrammarConstraint, m, "grammar") for m in ("advance", "take_certain", "incomplete")),
        *((cls, m, "drafting") for cls in (Lookup, ModelProposal) for m in ("draft", "tree")),
        *((cls, m, "drafting") for cls in DRAFTERS for m in ("begin", "offer", "commit")),
        *((cls, m, "drafting") for cls in (AdaptiveDraftLength, FixedK) for m in ("choose",)),
        *((cls, m, "drafting") for cls in (AdaptiveDraftLength, FixedK) for m in ("observe",)),
    ]
    with contextlib.ExitStack() as stack:
        for owner, attr, name in regions:
            wrapped = parts.wrap(getattr(owner, attr), name)
            stack.enter_context(mock.patch.object(owner, attr, wrapped))
        bench.target.parts = bench.draft.parts = parts
        try:
            yield
        finally:
            bench.target.parts = bench.draft.parts = None


def measure(
    bench: Bench, chosen: Sequence[Config], tokens: int, repeats: int
) -> dict[str, dict[str, Any]]:
    """Per configuration: the median of the plain runs' CPU time per token and of each part's,
    in microseconds, and the draft model's steps per token."""
    plain: dict[Config, list[float]] = defaultdict(list)
    split: dict[Config, list[dict[str, float]]] = defaultdict(list)
    steps: dict[Config, list[float]] = defaultdict(list)
    for repeat in range(repeats):
        # Interleaved, the order reversed every other repeat: slow spells of the shared
        # cores fall on every configuration alike.
        for config in chosen if repeat % 2 == 0 else list(reversed(chosen)):
            run = bench.run(config, tokens)
            per = 1e6 / max(run["tokens"], 1)
            plain[config].append(run["s"] * per)
            steps[config].append(run["draft_steps"] / max(run["tokens"], 1))
            parts = Parts()
            with instrumented(bench, parts):
                timed = bench.run(config, tokens, parts)
            split[config].append(
                {p: parts.totals[p] * 1e6 / max(timed["tokens"], 1) for p in PARTS}
            )
    out = {}
    for config in chosen:
        row: dict[str, Any] = {"us_per_token": statistics.median(plain[config])}
        for p in PARTS:
            row[p] = statistics.median(s[p] for s in split[config])
        row["draft_steps_per_token"] = statistics.median(steps[config])
        if row["draft_steps_per_token"]:
            row["drafting_us_per_draft_step"] = row["drafting"] / row["draft_steps_per_token"]
        out[config.name] = row
    return out


def measure_contexts(
    bench: Bench, chosen: Sequence[Config], tokens: int, repeats: int, contexts: Sequence[int]
) -> dict[str, dict[str, float]]:
    """Per configuration and context length (the prompt's tokens): the median CPU time per
    token of the rounds alone (reading the prompt left out), interleaved as `measure` does. A
    part whose cost grows with the context shows as a difference between the columns."""
    runs: dict[tuple[Config, int], list[float]] = defaultdict(list)
    for repeat in range(repeats):
        order = [(c, n) for c in chosen for n in contexts]
        for config, n in order if repeat % 2 == 0 else list(reversed(order)):
            run = bench.run(config, tokens, context=n)
            runs[config, n].append(run["rounds_s"] * 1e6 / max(run["tokens"], 1))
    return {c.name: {str(n): statistics.median(runs[c, n]) for n in contexts} for c in chosen}


def context_table(results: dict[str, dict[str, float]]) -> str:
    contexts = list(next(iter(results.values())))
    head = ["config", *(f"us/token at {n} tokens of context" for n in contexts)]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for name, row in results.items():
        lines.append(" | ".join([name, *(f"{row[n]:.0f}" for n in contexts)]))
    return "\n".join(f"| {line} |" for line in lines)


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ["config", "us/token", *PARTS, "of 5 ms", "of 10 ms", "of 30 ms", "us/draft step"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for name, row in results.items():
        total = row["us_per_token"]
        cells = [name, f"{total:.0f}", *(f"{row[p]:.0f}" for p in PARTS)]
        cells += [f"{100 * total / (ms * 1000):.1f} %" for ms in (5, 10, 30)]
        per_step = row.get("drafting_us_per_draft_step")
        cells.append(f"{per_step:.0f}" if per_step is not None else "-")
        lines.append(" | ".join(cells))
    return "\n".join(f"| {line} |" for line in lines)


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--tokens", type=int, default=128, help="tokens per generation")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--configs", default="none,model,auto", help="drafters, comma-separated")
    parser.add_argument("--copy-logits", action="store_true", help="rows handed over as copies")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument(
        "--contexts",
        help="context lengths, comma-separated (e.g. 100,4000): the rounds' cost per token at "
        "each instead of the split by part (grammar-free configurations)",
    )
    args = parser.parse_args(argv)
    bench = Bench.make(args.vocab, args.copy_logits)
    chosen = configs(args.configs.split(","))
    if args.contexts:
        return contexts_main(bench, args)
    bench.run(chosen[0], 4)  # warm-up: first calls, the grammar tokenizer
    if any(c.grammar for c in chosen):
        bench.run(Config("none", 0.0, True), 4)
    results = measure(bench, chosen, args.tokens, args.repeats)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


def contexts_main(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    chosen = [c for c in configs(args.configs.split(",")) if not c.grammar]
    contexts = [int(n) for n in args.contexts.split(",")]
    bench.run(chosen[0], 4)  # warm-up
    results: dict[str, Any] = measure_contexts(bench, chosen, args.tokens, args.repeats, contexts)
    print(context_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
