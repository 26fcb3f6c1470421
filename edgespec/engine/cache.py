"""A model with a mirror of the tokens its KV cache holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from edgespec.engine import warmup
from edgespec.engine.protocol import Model, TreeModel


def _head(seq: Sequence[int], n: int) -> list[int]:
    if isinstance(seq, list):
        return seq if len(seq) == n else seq[:n]
    return list(seq[:n])


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items `a` and `b` share: lists compared as lists, with no copy."""
    n = min(len(a), len(b))
    a, b = _head(a, n), _head(b, n)
    if a == b:
        return n
    # The first difference is most often among the last few (a draft the target rejected).
    lo, hi = max(0, n - 64), n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    if a[:lo] != b[:lo]:
        lo, hi = 0, lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class CachedModel:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.tokens: list[int] = []
        # The context last compared with the mirror and how far they agreed: a generation's
        # context only grows, so the next comparison starts there (`shared`).
        self._seen: Sequence[int] | None = None
        self._agreed = 0

    def decode(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """The rows may be lent (`decode_lent`: not copied): read them before the next decode."""
        if n_logits:  # a round's pass; a prompt's (no rows) is read once, cold
            self._warm("chain", len(tokens), lambda: self.model.decode(tokens, n_logits))
        logits = getattr(self.model, "decode_lent", self.model.decode)(tokens, n_logits)
        self.tokens.extend(tokens)
        return logits

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """A tree after the cached tokens (lent rows, as `decode`'s); see `keep_path`."""
        model = cast(TreeModel, self.model)
        self._warm("tree", len(tokens), lambda: model.decode_tree(tokens, parents))
        return getattr(model, "decode_tree_lent", model.decode_tree)(tokens, parents)

    def _warm(self, kind: str, n: int, run: Callable[[], object]) -> None:
        """`run` once first where the model warms this shape (warmup.py), the cache put back."""
        held = self.model.n_past
        warmup.warm(self.model, kind, n, run, lambda: self.model.rewind(held))

    def keep_path(self, rows: Sequence[int], tokens: Sequence[int]) -> None:
        cast(TreeModel, self.model).keep_path(rows)
        self.tokens.extend(tokens)

    def keep(self, n: int) -> None:
        """Drop every cached position >= n."""
        # The mirror may lag the cache (an exception after a decode), never lead it: it is
        # cut first, so an interrupt before the rewind only leaves it short.
        held = self.model.n_past
        self._cut(min(n, held))
        if n < held:
            self.model.rewind(n)

    def _cut(self, n: int) -> None:
        del self.tokens[n:]
        self._agreed = min(self._agreed, len(self.tokens))

    def reusable(self, tokens: Sequence[int]) -> int:
        # A model that lost its cache (a target on RPC servers, reloaded) holds fewer tokens.
        self._cut(self.model.n_past)
        return self.shared(tokens)

    def shared(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the mirror holds; against the context compared last time
        (the same object, which only grows) a round compares its new tokens only."""
        start = 0
        if tokens is self._seen:
            start = min(self._agreed, len(self.tokens), len(tokens))
            if start and self.tokens[start - 1] != tokens[start - 1]:
                start = 0
        if start:
            end = min(len(self.tokens), len(tokens))
            shared = start + common_prefix(self.tokens[start:end], tokens[start:end])
        else:
            shared = common_prefix(self.tokens, tokens)
        self._seen, self._agreed = tokens, shared
        return shared

    def commit(self, tokens: Sequence[int]) -> None:
        self.keep(self.reusable(tokens))

    def sync(self, tokens: Sequence[int], shared: int | None = None) -> np.ndarray:
        """Bring the cache to `tokens`; the logits after the last one."""
        if shared is None:
            shared = self.reusable(tokens)
        else:
            self._cut(self.model.n_past)
        keep = min(shared, len(self.tokens), len(tokens) - 1)
        self.keep(keep)
        logits = self.decode(tokens[keep:], 1)[0]
        self._seen, self._agreed = tokens, len(tokens)
        return logits

    def reset(self) -> None:
        self.keep(0)
