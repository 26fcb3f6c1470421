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
        """Append tokens to the cache; return float logits of the last `n_logits` positions,
        shape (n_logits, n_vocab)."""
        ...

    def rewind(self, n_past: int) -> None:
        """Drop every cached position >= n_past."""
        ...


class Vocab(Protocol):
    """What the engine needs to turn the target's tokens into text."""

    def is_eog(self, token: int) -> bool: ...

    def token_bytes(self, token: int) -> bytes: ...


class TargetModel(Model, Vocab, Protocol):
    pass
