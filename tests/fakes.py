"""Small numpy language models that meet the engine's model protocol, a plan made without
reading a model file, a policy that verifies a tree whenever it can, and a clock that only
the test moves.

A `FakeModel`'s logits at a position depend only on the last `order` tokens, through a seeded
table; a draft is the same table plus noise, so it agrees with the target often but not always.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgespec.engine.drafters import Choice, Lookup, Proposal
from edgespec.engine.events import RoundEvent
from edgespec.options import Drafting
from edgespec.planner.calibrate import Calibration
from edgespec.planner.decide import decide
from edgespec.planner.memory import MemoryPlan, ModelMemory
from edgespec.planner.plan import DecodePlan
from edgespec.planner.resources import Fit, Resources
from edgespec.system.device import Hardware

# Token pieces: ASCII, a space, a newline, and the two halves of "é" (0xC3 0xA9), so text
# streaming must join bytes across tokens.
PIECES = [
    b"a",
    b"b",
    b"c",
    b"d",
    b" ",
    b"\n",
    b"\xc3",
    b"\xa9",
    b"x",
    b"y",
    b"z",
    b"S",
    b"T",
    b"OP",
    b"ab",
    b"cd",
]


class FakeModel:
    def __init__(
        self,
        n_vocab: int = 16,
        n_ctx: int = 512,
        seed: int = 0,
        order: int = 2,
        scale: float = 3.0,
        noise: float = 0.0,
        noise_seed: int = 1,
        eog: int | None = None,
        tree_width: int = 1,
        sequences: int = 1,
    ) -> None:
        self.n_vocab = n_vocab
        self.tree_width = tree_width  # > 1: decodes tree drafts (decode_tree, keep_path)
        self._tree: list[list[int]] | None = None  # the pending tree's paths, by row
        self.n_ctx = n_ctx
        self.order = order
        self.eog = eog
        rng = np.random.default_rng(seed)
        self.table = rng.normal(size=(n_vocab**order, n_vocab)) * scale
        if noise:
            self.table = (
                self.table + np.random.default_rng(noise_seed).normal(size=self.table.shape) * noise
            )
        self.tokens: list[int] = []
        self.decode_calls = 0
        self.decoded_tokens = 0
        # As llama.cpp's unified cache: `sequences` sequences of up to n_ctx positions each
        # share n_ctx * sequences cells; sequence 0 is the one `decode` and `rewind` act on.
        self.sequences = sequences
        self._seqs: dict[int, list[int]] = {0: self.tokens}
        self.batches: list[list[int]] = []  # each decode_batch's sequences, in request order

    @property
    def n_past(self) -> int:
        # A pending tree holds cells past the committed tokens, as llama.cpp's cache does.
        return len(self.tokens) + (self._tree is not None)

    def logits_for(self, context: Sequence[int]) -> np.ndarray:
        row = 0
        for t in list(context)[-self.order :]:
            row = row * self.n_vocab + t
        return self.table[row].astype(np.float32)

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        assert 0 <= n_logits <= len(tokens)
        assert self._tree is None, "decode with a tree pending"
        assert self.n_past + len(tokens) <= self.n_ctx, "decode past the context"
        assert all(0 <= t < self.n_vocab for t in tokens), f"token id outside {self.n_vocab}"
        self.decode_calls += 1
        self.decoded_tokens += len(tokens)
        start = len(self.tokens)
        self.tokens.extend(tokens)
        ends = range(start + len(tokens) - n_logits + 1, start + len(tokens) + 1)
        if n_logits == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return np.stack([self.logits_for(self.tokens[:e]) for e in ends])

    def decode_lent(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """As the llama.cpp adapter's: `decode`, sequence 0, rows it may reuse later."""
        return self.decode(tokens, n_logits)

    def rewind(self, n_past: int) -> None:
        assert 0 <= n_past <= self.n_past
        self._tree = None
        del self.tokens[n_past:]

    def seq_past(self, seq: int) -> int:
        assert 0 <= seq < self.sequences, f"sequence {seq} of {self.sequences}"
        return self.n_past if seq == 0 else len(self._seqs.get(seq, []))

    def seq_rewind(self, seq: int, n_past: int) -> None:
        assert 0 <= n_past <= self.seq_past(seq)
        if seq == 0:
            self.rewind(n_past)
        else:
            del self._seqs.setdefault(seq, [])[n_past:]

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        """One batch of several sequences' tokens (each at the positions after its own)."""
        assert self._tree is None, "decode with a tree pending"
        seqs = [seq for seq, _, _ in requests]
        assert len(set(seqs)) == len(seqs), "a sequence twice in one batch"
        cells = sum(map(len, self._seqs.values())) + sum(len(t) for _, t, _ in requests)
        assert cells <= self.n_ctx * self.sequences, "the batch overflows the cache's cells"
        out = []
        for seq, tokens, n_logits in requests:
            assert 0 <= n_logits <= len(tokens) and 0 <= seq < self.sequences
            held = self._seqs.setdefault(seq, [])
            assert len(held) + len(tokens) <= self.n_ctx, "decode past the sequence's context"
            assert all(0 <= t < self.n_vocab for t in tokens), f"token id outside {self.n_vocab}"
            start = len(held)
            held.extend(tokens)
            ends = range(start + len(tokens) - n_logits + 1, start + len(tokens) + 1)
            rows = [self.logits_for(held[:e]) for e in ends]
            out.append(np.stack(rows) if rows else np.empty((0, self.n_vocab), np.float32))
        self.decode_calls += 1
        self.decoded_tokens += sum(len(t) for _, t, _ in requests)
        self.batches.append(seqs)
        return out

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        assert self.tree_width > 1 and self._tree is None
        assert len(tokens) == len(parents) and parents[0] == -1
        assert self.n_past + len(tokens) <= self.n_ctx, "tree past the context"
        paths: list[list[int]] = []
        for tok, parent in zip(tokens, parents, strict=True):
            assert -1 <= parent < len(paths), "a row before its parent"
            paths.append([*(paths[parent] if parent >= 0 else []), tok])
        leaves = len(tokens) - len({p for p in parents if p >= 0})
        assert leaves <= self.tree_width, f"{leaves} leaves, room for {self.tree_width}"
        self.decode_calls += 1
        self.decoded_tokens += len(tokens)
        self._tree = paths
        return np.stack([self.logits_for(self.tokens + path) for path in paths])

    def keep_path(self, rows: Sequence[int]) -> None:
        assert self._tree is not None and rows and rows[0] == 0
        path = self._tree[rows[-1]]
        assert [self._tree[r] for r in rows] == [path[: i + 1] for i in range(len(path))]
        self.tokens.extend(path)
        self._tree = None

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def token_bytes(self, token: int) -> bytes:
        return PIECES[token % len(PIECES)]


def pair(seed: int = 0, noise: float = 1.0, **kw: object) -> tuple[FakeModel, FakeModel]:
    """A target and a draft that agrees with it most of the time."""
    target = FakeModel(seed=seed, **kw)  # type: ignore[arg-type]
    draft = FakeModel(seed=seed, noise=noise, noise_seed=seed + 100, **kw)  # type: ignore[arg-type]
    return target, draft


ALPHABET = "abcdefghijklmnopqrstuvwxyz"


class FakeTextModel(FakeModel):
    """A FakeModel that also tokenizes and renders chats: token i is the letter ALPHABET[i],
    so generated text tokenizes back to the same tokens, as with a real model."""

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        letters = ALPHABET[: self.n_vocab]
        return [letters.index(ch) if ch in letters else ord(ch) % self.n_vocab for ch in text]

    def token_bytes(self, token: int) -> bytes:
        return ALPHABET[token].encode()

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> list[int]:
        # Like ChatML, the generation prompt is how an answer starts in the history.
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return self.tokenize(text + "<assistant>")

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def close(self) -> None:
        pass


def fake_plan(drafter: str = "auto") -> DecodePlan:
    """The plan `make_plan` would make for a 1.5B/0.5B pair on a 4-core CPU with room for both,
    without reading a model file: for commands run on fake models."""
    hardware = Hardware(16_000_000_000, 8_000_000_000, 4, 8, False, "cpu", None, "Linux x86_64")
    memory = MemoryPlan(
        ModelMemory("target-1.5b-instruct-q4_k_m.gguf", 1_100_000_000, 120_000_000, 300_000_000),
        ModelMemory("draft-0.5b-instruct-q4_k_m.gguf", 400_000_000, 50_000_000, 150_000_000),
        hardware.available_ram,
    )
    resources = Resources(
        hardware=hardware, memory=memory, fit=Fit.BOTH, n_ctx=4096, n_threads=4, n_gpu_layers=0
    )
    calibration = Calibration(0.025, {1: 1.0, 2: 1.7, 4: 2.6, 8: 4.5}, 0.004, noise=0.01, passes=3)
    files = Path("target-1.5b-instruct-q4_k_m.gguf"), Path("draft-0.5b-instruct-q4_k_m.gguf")
    return decide(Drafting.of(drafter, keep_draft=True), *files, resources, calibration)


class TreeAlways:
    """A policy that verifies a tree whenever the drafter offers a fork."""

    def __init__(self, k: int, nodes: int, width: int) -> None:
        self.k, self.nodes, self.width = k, nodes, width
        self.trees = 0

    def choose(self, proposals: Sequence[Proposal]) -> Choice | None:
        if not proposals:
            return None
        proposal = proposals[0]
        k = min(self.k, proposal.available)
        if not isinstance(proposal, Lookup) or proposal.forks:
            self.trees += 1
            return Choice(proposal, k, self.width, max(self.nodes, k))
        return Choice(proposal, k)

    def observe(self, choice: Choice | None, round_: RoundEvent, seconds: float) -> None:
        pass


class Clock:
    """A clock that only the test moves (or its fake models): timings without timing noise."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


FIM_PIECES = [*ALPHABET, "\n", " ", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
FIM_PIECES += ["<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]


class FakeFimModel(FakeTextModel):
    """A FakeTextModel with a newline, a space and Qwen2.5-Coder's six FIM tokens, which it
    declares as llama.cpp does (`fim_tokens`) and which, as in llama.cpp, end a generation but
    the first three; their text is empty, as llama.cpp renders control tokens."""

    def __init__(self, **kw: object) -> None:
        super().__init__(n_vocab=len(FIM_PIECES), **kw)  # type: ignore[arg-type]
        names = ("pre", "suf", "mid", "pad", "rep", "sep")
        self.fim_tokens = {n: 28 + i for i, n in enumerate(names)}

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        plain = FIM_PIECES[:28]
        return [plain.index(ch) if ch in plain else ord(ch) % 26 for ch in text]

    def token_bytes(self, token: int) -> bytes:
        return b"" if token >= 28 else FIM_PIECES[token].encode()

    def is_eog(self, token: int) -> bool:
        return token >= 31
