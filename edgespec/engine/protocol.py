"""The small model contract the engine needs; llama.cpp models and numpy fakes both meet it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Model(Protocol):
    """A causal LM with a KV cache holding one sequence of `n_past` tokens."""

    n_vocab: int
    n_ctx: int

    @property
    def n_past(self) -> int: ...

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Append tokens to the cache; the logits of the last `n_logits` positions."""
        ...

    def rewind(self, n_past: int) -> None:
        """Drop every cached position >= n_past."""
        ...


class TreeModel(Model, Protocol):
    """A model that verifies a tree of tokens in one pass."""

    tree_width: int  # the most leaves a tree may have

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Every row's logits (`parents[i]`: the row token i follows, -1: the cache); only
        `keep_path` or `rewind` may follow."""
        ...

    def keep_path(self, rows: Sequence[int]) -> None:
        """Keep one path's rows from row 0 down; drop the rest of the tree."""
        ...


def supports_tree(model: object) -> bool:
    return getattr(model, "tree_width", 1) > 1 and hasattr(model, "decode_tree")


class Vocab(Protocol):
    """What the engine needs to turn the target's tokens into text."""

    def is_eog(self, token: int) -> bool: ...

    def token_bytes(self, token: int) -> bytes: ...


class TargetModel(Model, Vocab, Protocol):
    pass
