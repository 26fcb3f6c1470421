"""Tree drafts: several candidate continuations verified in one target pass.

A tree is a main chain (what a chain draft would have been) plus branches that leave it where
the drafter saw another likely continuation. The target reads the last committed token and every
node at once (llama.cpp: one batch, a sequence per leaf, so a node shared by several branches is
computed and cached once); verification then walks down from the root.

Losslessness: a deterministic candidate (a lookup, a draft model's argmax or second choice) is
taken when the target's next token y, drawn from its processed distribution p exactly as plain
decoding would draw it (argmax at T = 0), is that candidate; the walk follows the child whose
token is y. (A chain of deterministic tokens verified this way is the usual rule: accept x with
probability p(x), else draw from p without x.) At T > 0 a draft model's main chain is sampled
from its distribution q, as a chain draft is: its token x is first accepted with probability
min(1, p(x) / q(x)), as in a chain; when it is not, y is drawn from the residual
norm(max(p - q, 0)) and the other children are matched against that y. Given x and its
rejection the residual is y's exact law, whatever other candidates were chosen from x (this is
SpecInfer's multi-candidate rule, Miao et al. 2023), so the emitted tokens are draws from p
whatever the tree; the tree only decides how many of them one pass yields.
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
    """Nodes in topological order (a parent before its children); nodes 0..main-1 are the main
    chain. No two children of a node carry the same token."""

    tokens: list[int]
    parents: list[int]
    main: int
    source: str = "none"
    # A draft model's confidence in each main-chain token (its top probability, as a chain's)
    confidence: tuple[float, ...] = ()
    # The distributions a sampled main chain was drawn from, one per main node, and one more
    # where a drawn token the target cannot read was cut (always rejected); () when it is
    # deterministic.
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
        """The main chain plus branches `(at, tokens)` leaving it after main[:at]; a branch is
        merged into what is already there (a trie), so shared prefixes are one node."""
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
        """Its number of leaves: the sequences one target pass holds."""
        return len(self.tokens) - len({p for p in self.parents if p != ROOT})

    def child(self, node: int, token: int) -> int | None:
        return self._children.get(node, {}).get(token)

    def children(self, node: int) -> list[int]:
        return list(self._children.get(node, {}).values())

    def path(self, node: int) -> list[int]:
        """The nodes from the root down to `node`."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def within(self, n_vocab: int) -> TreeDraft:
        """The tree without nodes the target cannot read (a draft model's vocabulary may be
        larger than the target's) and what hangs below them."""
        return self._pruned(lambda token, _: token < n_vocab, keep_cut=True)

    def through_end(self, is_end: Callable[[int], bool]) -> TreeDraft:
        """The tree without what hangs below an end-of-generation node: generation stops
        there, so nothing below it is ever kept (as `Draft.through_end` for a chain)."""
        return self._pruned(lambda _, above: above is None or not is_end(above))

    def _pruned(self, keep: Callable[[int, int | None], bool], keep_cut: bool = False) -> TreeDraft:
        """The tree without the nodes `keep(token, parent's token or None)` refuses and what
        hangs below them. `keep_cut`: a sampled main chain keeps the distribution its first
        refused token was drawn from, to be rejected there (`verify_tree`); past an
        end-of-generation node nothing is verified, so nothing is kept."""
        kept: dict[int, int] = {}  # node: its index in the new tree
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
    """What a tree round tells the policy beyond the tokens: how the main chain fared, and
    whether a branch was there (and taken) where the main chain missed."""

    main_drafted: int
    main_accepted: int
    offered: bool
    taken: bool


def verify_tree(
    tree: TreeDraft, logits: np.ndarray, sampler: Sampler
) -> tuple[list[int], int, TreeOutcome]:
    """Walk down from the root: the accepted nodes, the target's own next token, the outcome.

    `logits` has a row per batch row (see `batch_parents`)."""
    node = ROOT
    path: list[int] = []
    while True:
        row = logits[node + 1]
        if sampler.greedy:
            y = int(np.argmax(row))
        else:
            p = sampler.dist(row)
            # Main-chain nodes are 0..main-1, each the child of the one before: while the walk
            # has only taken them, node `len(path)` is the main child (or the cut token's place).
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
    # Where the walk left the main chain (or reached its end): was a branch there?
    fork = path[on_main - 1] if on_main else ROOT
    offered = any(n >= tree.main for n in tree.children(fork))
    return path, y, TreeOutcome(tree.main, on_main, offered, on_main < len(path))
