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


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if list(a[lo:mid]) == list(b[lo:mid]):
            lo = mid
        else:
            hi = mid
    return lo


class CachedModel:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.tokens: list[int] = []

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
        del self.tokens[min(n, held) :]
        if n < held:
            self.model.rewind(n)

    def reusable(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the cache already holds."""
        # A model that lost its cache (a target on RPC servers, reloaded) holds fewer tokens
        # than the mirror says: the mirror follows it first.
        del self.tokens[self.model.n_past :]
        return common_prefix(self.tokens, tokens)

    def commit(self, tokens: Sequence[int]) -> None:
        """Keep only the prefix shared with `tokens`."""
        self.keep(self.reusable(tokens))

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        """Bring the cache to `tokens` (reusing the common prefix); logits after the last one."""
        keep = min(self.reusable(tokens), len(tokens) - 1)
        self.keep(keep)
        return self.decode(tokens[keep:], 1)[0]

    def reset(self) -> None:
        self.keep(0)
