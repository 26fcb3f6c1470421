"""Tree drafts: a main chain plus branches, verified in one target pass (a sequence per leaf).

Lossless: the walk follows the child whose token is the target's own draw y from p (argmax at
T = 0). A sampled main chain's x is first accepted with min(1, p(x) / q(x)); else y is drawn
from norm(max(p - q, 0)), y's exact law whatever else was chosen (SpecInfer's multi-candidate
rule, Miao et al. 2023), and matched against the other children.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgespec.engine.sampling import Row, Sampler
from edgespec.engine.verify import after_rejection

ROOT = -1  # the parent of nodes that follow the last committed token


@dataclass(frozen=True)
class TreeDraft:
    """Nodes, parents first, 0..main-1 the main chain; no two siblings carry the same token."""

    tokens: list[int]
    parents: list[int]
    main: int
    source: str = "none"
    confidence: tuple[float, ...] = ()  # the draft model's, of each main-chain token
    # A sampled main chain's distributions, and one more where a token the target cannot
    # read was cut (always rejected); (): deterministic.
    q: tuple[Row, ...] = ()
    _children: dict[int, dict[int, int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for node, (tok, parent) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if not ROOT <= parent < node:
                raise ValueError(f"node {node}: parent {parent} is not an earlier node")
            siblings = self._children.setdefault(parent, {})
            if tok in siblings:
                raise ValueError(f"node {node}: token {tok} is already a child of {parent}")
            siblings[tok] = node

    @classmethod
    def build(
        cls,
        main: Sequence[int],
        branches: Sequence[tuple[int, Sequence[int]]],
        source: str,
        confidence: tuple[float, ...] = (),
        q: tuple[Row, ...] = (),
    ) -> TreeDraft:
        """The main chain plus branches `(at, tokens)` leaving it after main[:at], as a trie."""
        tokens, parents = list(main), [i - 1 for i in range(len(main))]
        children = {(i - 1, tok): i for i, tok in enumerate(tokens)}
        for at, seq in branches:
            parent = at - 1
            for tok in seq:
                node = children.get((parent, tok))
                if node is None:
                    node = len(tokens)
                    tokens.append(tok)
                    parents.append(parent)
                    children[(parent, tok)] = node
                parent = node
        return cls(tokens, parents, len(main), source, confidence, q)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def width(self) -> int:
        return len(self.tokens) - len({p for p in self.parents if p != ROOT})

    def child(self, node: int, token: int) -> int | None:
        return self._children.get(node, {}).get(token)

    def children(self, node: int) -> list[int]:
        return list(self._children.get(node, {}).values())

    def path(self, node: int) -> list[int]:
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def within(self, n_vocab: int) -> TreeDraft:
        return self._pruned(lambda token, _: token < n_vocab, keep_cut=True)

    def through_end(self, is_end: Callable[[int], bool]) -> TreeDraft:
        """The tree without what hangs below an end-of-generation node (never kept)."""
        return self._pruned(lambda _, above: above is None or not is_end(above))

    def _pruned(self, keep: Callable[[int, int | None], bool], keep_cut: bool = False) -> TreeDraft:
        """The tree without the nodes `keep` refuses and what hangs below them; `keep_cut`: a
        sampled chain keeps its first refused token's q, to be rejected there."""
        kept: dict[int, int] = {}
        tokens: list[int] = []
        parents: list[int] = []
        for node, (tok, parent) in enumerate(zip(self.tokens, self.parents, strict=True)):
            above = None if parent == ROOT else self.tokens[parent]
            if (parent == ROOT or parent in kept) and keep(tok, above):
                kept[node] = len(tokens)
                tokens.append(tok)
                parents.append(kept.get(parent, ROOT))
        if len(tokens) == len(self.tokens):
            return self
        main = next((i for i in range(self.main) if i not in kept), self.main)
        q = self.q[: main + 1] if keep_cut else self.q[:main]
        return TreeDraft(tokens, parents, main, self.source, self.confidence[:main], q)

    def batch_parents(self) -> list[int]:
        """Parents by batch row: row 0 is the last committed token, row i + 1 is node i."""
        return [ROOT, *(p + 1 for p in self.parents)]


def branch_lengths(nodes: int, branches: int) -> list[int]:
    """`nodes` tokens shared out among `branches` (the earlier, likelier ones first)."""
    if branches <= 0:
        return []
    share, extra = divmod(max(nodes, 0), branches)
    return [share + (i < extra) for i in range(branches)]


@dataclass(frozen=True)
class TreeOutcome:
    """How a tree round's main chain fared; whether a branch was there (and taken) at a miss."""

    main_drafted: int
    main_accepted: int
    offered: bool
    taken: bool


def verify_tree(
    tree: TreeDraft, logits: np.ndarray, sampler: Sampler
) -> tuple[list[int], int, TreeOutcome]:
    node = ROOT
    path: list[int] = []
    while True:
        row = logits[node + 1]
        if sampler.greedy:
            y = int(np.argmax(row))
        else:
            p = sampler.dist(row)
            # While the walk has taken only main nodes, node `len(path)` is the main child
            # (or the cut token's place).
            main_child = len(path)
            if node + 1 == main_child and main_child < len(tree.q):
                q = tree.q[main_child]
                x = tree.tokens[main_child] if main_child < tree.main else None  # None: cut
                if x is not None and sampler.rng.random() < min(1.0, p[x] / q[x]):
                    path.append(main_child)
                    node = main_child
                    continue
                y = after_rejection(p, q, sampler)
            else:
                y = sampler.draw(p)
        nxt = tree.child(node, y)
        if nxt is None:
            break
        path.append(nxt)
        node = nxt
    on_main = next((i for i, n in enumerate(path) if n >= tree.main), len(path))
    fork = path[on_main - 1] if on_main else ROOT
    offered = any(n >= tree.main for n in tree.children(fork))
    return path, y, TreeOutcome(tree.main, on_main, offered, on_main < len(path))
