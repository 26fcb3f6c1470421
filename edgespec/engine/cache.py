"""A model together with exactly the tokens its KV cache holds.

The target (in `Session`) and the draft (shared by every drafter that uses it) are both kept
this way, so a new generation reuses the longest common prefix and every round can cut the
cache back to the committed tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from edgespec.engine.protocol import Model, TreeModel


def _head(seq: Sequence[int], n: int) -> list[int]:
    """The first n items as a list, without a copy where `seq` is that list already."""
    if isinstance(seq, list):
        return seq if len(seq) == n else seq[:n]
    return list(seq[:n])


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items `a` and `b` share. It runs several times a round on the whole
    context: lists compared as lists (the same int objects compare by identity, about a
    nanosecond each), where copying both sides twice took 25 us a call at 4,000 tokens."""
    n = min(len(a), len(b))
    a, b = _head(a, n), _head(b, n)
    if a == b:
        return n
    # The first difference is most often among the last few (a draft the target rejected).
    lo, hi = max(0, n - 64), n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
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
        # The context last compared with the mirror and how many leading tokens they shared:
        # a generation's context only grows (the engine appends the tokens it emits), so the
        # next comparison with it starts there, and a round's cost does not grow with the
        # conversation. Cutting the mirror lowers it.
        self._seen: Sequence[int] | None = None
        self._agreed = 0

    def decode(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """The rows may be lent (`decode_lent`): read them before this model's next decode."""
        # A model that can lend its rows instead of copying them (the llama.cpp adapter) is
        # asked to: the engine reads a decode's rows before the model's next decode.
        logits = getattr(self.model, "decode_lent", self.model.decode)(tokens, n_logits)
        self.tokens.extend(tokens)
        return logits

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """A tree after the cached tokens (see TreeModel); the mirror learns which path stays
        at `keep_path`. The rows may be lent, as `decode`'s."""
        model = cast(TreeModel, self.model)
        return getattr(model, "decode_tree_lent", model.decode_tree)(tokens, parents)

    def keep_path(self, rows: Sequence[int], tokens: Sequence[int]) -> None:
        """Keep the tree's `rows` (a path from row 0), whose tokens are `tokens`."""
        cast(TreeModel, self.model).keep_path(rows)
        self.tokens.extend(tokens)

    def keep(self, n: int) -> None:
        """Drop every cached position >= n."""
        # The mirror may lag the cache (an exception right after a decode), never lead it:
        # so it is cut first, and an interrupt before the rewind only leaves it short.
        held = self.model.n_past
        self._cut(min(n, held))
        if n < held:
            self.model.rewind(n)

    def _cut(self, n: int) -> None:
        """The mirror cut to its first n tokens (what it agreed on with a context too)."""
        del self.tokens[n:]
        self._agreed = min(self._agreed, len(self.tokens))

    def reusable(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the cache already holds."""
        # A model that lost its cache (a target on RPC servers, reloaded) holds fewer tokens
        # than the mirror says: the mirror follows it first.
        self._cut(self.model.n_past)
        return self.shared(tokens)

    def shared(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the mirror holds. Against the context compared last time
        (the same object, which only grows), from where they agreed then on (the token before
        it checked again): the comparison covers the round's new tokens, not the whole
        conversation (15 us a round at 4,000 tokens)."""
        start = 0
        if tokens is self._seen:
            start = min(self._agreed, len(self.tokens), len(tokens))
            if start and self.tokens[start - 1] != tokens[start - 1]:
                start = 0
        if start:
            end = min(len(self.tokens), len(tokens))  # a mirror that lags: its length at most
            shared = start + common_prefix(self.tokens[start:end], tokens[start:end])
        else:
            shared = common_prefix(self.tokens, tokens)
        self._seen, self._agreed = tokens, shared
        return shared

    def commit(self, tokens: Sequence[int]) -> None:
        """Keep only the prefix shared with `tokens`."""
        self.keep(self.reusable(tokens))

    def sync(self, tokens: Sequence[int], shared: int | None = None) -> np.ndarray:
        """Bring the cache to `tokens` (reusing the common prefix: `shared` tokens where the
        caller has just compared them); logits after the last one."""
        if shared is None:
            shared = self.reusable(tokens)
        else:
            self._cut(self.model.n_past)  # as `reusable` does
        keep = min(shared, len(self.tokens), len(tokens) - 1)
        self.keep(keep)
        logits = self.decode(tokens[keep:], 1)[0]
        self._seen, self._agreed = tokens, len(tokens)
        return logits

    def reset(self) -> None:
        self.keep(0)
