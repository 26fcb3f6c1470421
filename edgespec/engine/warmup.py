"""Batch shapes warmed before a round times them. A GPU backend compiles or allocates for a batch
shape the first time a process runs it (Metal's pipelines, CUDA's pool and graphs): timed in a
round, that one-off cost would teach `auto`'s learner a steep curve (calibration warms each size
it times itself). A model that computes on a GPU says so (`warms_shapes`); each shape it has not
run is run once first and undone, and the engine's round clock leaves that time out (`spent`: the
warm-ups may run in any thread, a shared pass warms for every sequence in it)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Any

# Batches up to this many tokens are warmed: a round's verification (K + 1, a tree's nodes, a
# shared pass of a few sequences); longer ones are prompts, read once (a guess).
WARM_TOKENS = 64

_lock = threading.Lock()
_spent = 0.0  # seconds spent warming, in this process
_seen: weakref.WeakKeyDictionary[Any, set[tuple[str, int]]] = weakref.WeakKeyDictionary()


def spent() -> float:
    return _spent


def warm(
    model: Any, kind: str, tokens: int, run: Callable[[], object], undo: Callable[[], object]
) -> None:
    """Where `model` warms shapes and has not run `tokens` tokens of this `kind` together yet:
    `run` them and `undo` what that left in its cache, the time kept out of the round clock."""
    if tokens > WARM_TOKENS or not getattr(model, "warms_shapes", False):
        return
    with _lock:
        seen = _seen.setdefault(model, set())
        if (kind, tokens) in seen:
            return
        seen.add((kind, tokens))
    global _spent
    start = perf_counter()
    try:
        run()
        undo()
    finally:
        with _lock:
            _spent += perf_counter() - start
