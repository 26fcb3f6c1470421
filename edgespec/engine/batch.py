"""Several generations on one model, each on its own sequence (a `Lane`), their passes decoded
in one batch a step. No scheduler: whoever reads a generation's events and finds none waiting
has the next step run, under the batch's lock taken in turn.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent import futures
from dataclasses import replace
from typing import Any, Protocol, cast

import numpy as np

from edgespec.engine import warmup
from edgespec.engine.events import Event, TokenEvent
from edgespec.engine.generate import Pass, Steps

# Prompt tokens a shared step reads where no cost of the pass is known: the others wait for no
# more (measured: docs/tuning.md, Prompt chunks).
PROMPT_CHUNK = 32


class FairLock:
    """A reentrant lock handed out in the order asked: with a plain one the reader that let go
    takes it again at once (it holds the GIL), and another lane joins only in the gaps."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[int] = deque()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            self._queue.append(me)
            try:
                while self._owner is not None or self._queue[0] != me:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: out of the queue
                self._queue.remove(me)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._owner, self._depth = me, 1

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a lock this thread does not hold")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class BatchModel(Protocol):
    n_vocab: int
    n_ctx: int  # per sequence

    def seq_past(self, seq: int) -> int: ...

    def seq_rewind(self, seq: int, n_past: int) -> None: ...

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        """For each (seq, tokens, n_logits), its last `n_logits` rows, in request order."""
        ...


# What a lane does not hand on to its model: what would reach other sequences' cells (trees,
# and the model's own decodes, which act on sequence 0) or free the model the lanes share.
_NOT_LANES = frozenset({"decode_lent", "decode_tree", "decode_tree_lent", "keep_path", "close"})


class Lane:
    """One sequence of a BatchModel as a single-sequence model (chains only)."""

    tree_width = 1

    def __init__(self, model: BatchModel, seq: int) -> None:
        self.model = model
        self.seq = seq
        self.n_vocab = model.n_vocab
        self.n_ctx = model.n_ctx

    @property
    def n_past(self) -> int:
        return self.model.seq_past(self.seq)

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        return self.model.decode_batch([(self.seq, tokens, n_logits)])[0]

    def rewind(self, n_past: int) -> None:
        self.model.seq_rewind(self.seq, n_past)

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_LANES or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.model, name)


class _Running:
    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.waiting: Pass | None = None
        self.started = False
        self.events: deque[Event] = deque()
        self.error: BaseException | None = None
        self.ended = False
        self.seq = -1  # its lane's, once it has asked for a pass
        self.answered = 0  # tokens it has answered (none while it reads its prompt)


class Batch:
    """`chunk(others)`: the most prompt tokens a step reads beside `others` tokens of the other
    generations' rounds (None: PROMPT_CHUNK), shared by the prompts read in that step."""

    def __init__(self, model: BatchModel, chunk: Callable[[int], int] | None = None) -> None:
        self.model = model
        self.lock = FairLock()  # held by whoever runs a step (or starts or ends one)
        self._running: list[_Running] = []
        self.passes = 0
        self._tokens: dict[int, int] = {}  # by sequence: its tokens in its last batch
        self._carried: dict[int, int] = {}  # by sequence: its last batch's tokens, all of them
        self.chunk = chunk or (lambda others: PROMPT_CHUNK)
        self._stepper = futures.ThreadPoolExecutor(1, thread_name_prefix="edgespec-batch")

    @property
    def active(self) -> int:
        return len(self._running)

    def others(self, seq: int) -> tuple[int, int, int]:
        """The tokens the other running sequences put in their last batch, how many they are,
        and the fewest tokens any of them has answered: read within a step, without the lock
        (the step's thread would wait for its holder)."""
        others = [r for r in list(self._running) if r.seq != seq]
        tokens = sum(self._tokens.get(r.seq, 0) for r in others)
        return tokens, len(others), min((r.answered for r in others), default=0)

    def carried(self, seq: int) -> int:
        """The tokens of the last batch that carried `seq`, every sequence's."""
        return self._carried.get(seq, 0)

    def join(self, steps: Steps) -> Generator[Event, None, None]:
        """A Session's driver; closing (or dropping) the events ends it within the step."""
        run = _Running(steps)
        with self.lock:
            self._running.append(run)
        events = self._events(run)
        # A generator dropped before its first read never runs its `finally`.
        weakref.finalize(events, self._abandon, run)
        return events

    def _abandon(self, run: _Running) -> None:
        with self.lock:
            self._end(run, None)

    def _events(self, run: _Running) -> Generator[Event, None, None]:
        try:
            while True:
                # Only a step needs the lock (a deque's ends are thread-safe): readers take
                # turns per step, not per event.
                if not run.events and not run.ended:
                    with self.lock:
                        while not run.events and not run.ended:
                            self.step()
                try:
                    event = run.events.popleft()
                except IndexError:
                    if run.error is not None:
                        raise run.error from None
                    return
                yield event
        finally:
            with self.lock:
                self._end(run, None)

    def step(self) -> None:
        """A step that several generations share runs on the batch's own thread: llama.cpp's
        CPU backend keeps an OpenMP team per calling thread, and passes called from one thread
        and then another were slower (docs/tuning.md, Shared passes). A generation alone is
        stepped by its reader, as `drive` steps it."""
        with self.lock:
            if len(self._running) <= 1:
                self._step()
                return
            future = self._stepper.submit(self._step)
            try:
                future.result()
            except BaseException:
                futures.wait([future])  # the step ends before the lock is let go
                raise

    def _step(self) -> None:
        for run in [r for r in self._running if not r.started]:
            run.started = True
            self._advance(run, None)
        waiting = [r for r in self._running if r.waiting is not None]
        if not waiting:
            return
        passes = self._shares([r.waiting for r in waiting if r.waiting])
        try:
            rows = self._decode(passes)
        except Exception as exc:
            if len(passes) == 1:
                self._throw(waiting[0], exc)
                return
            # Each pass alone (a failed batch leaves the sequences as they were).
            for run, single in zip(waiting, passes, strict=True):
                self._alone(run, single)
            return
        for run, done, out in zip(waiting, passes, rows, strict=True):
            self._answer(run, done, out)

    def _shares(self, waiting: list[Pass]) -> list[Pass]:
        """A step's passes: a prompt shared with others is read a chunk at a time."""
        reading = [not p.n_logits for p in waiting]
        if len(waiting) == 1 or not any(reading):
            return waiting
        rounds = sum(len(p.tokens) for p, r in zip(waiting, reading, strict=True) if not r)
        size = max(1, self.chunk(rounds) // sum(reading))
        return [
            replace(p, tokens=p.tokens[:size]) if r and len(p.tokens) > size else p
            for p, r in zip(waiting, reading, strict=True)
        ]

    def _answer(self, run: _Running, done: Pass, rows: np.ndarray) -> None:
        """A decoded pass to its generation; a prompt read a chunk at a time waits on the rest."""
        if done is run.waiting:
            self._advance(run, rows)
            return
        assert run.waiting is not None
        run.waiting = replace(run.waiting, tokens=run.waiting.tokens[len(done.tokens) :])

    def _alone(self, run: _Running, single: Pass) -> None:
        try:
            rows = self._decode([single])[0]
        except Exception as exc:
            self._throw(run, exc)
        else:
            self._answer(run, single, rows)

    def _decode(self, passes: list[Pass]) -> list[np.ndarray]:
        lanes = [p.cache.model for p in passes]
        if any(p.parents is not None for p in passes) or not all(
            isinstance(m, Lane) for m in lanes
        ):
            return [p.run() for p in passes]  # not asked for by lanes: one by one
        requests = [
            (cast(Lane, m).seq, p.tokens, p.n_logits) for p, m in zip(passes, lanes, strict=True)
        ]
        held = [(seq, self.model.seq_past(seq)) for seq, _, _ in requests]

        def undo() -> None:
            for seq, past in held:
                self.model.seq_rewind(seq, past)

        size = sum(len(tokens) for _, tokens, _ in requests)
        warmup.warm(self.model, "batch", size, lambda: self.model.decode_batch(requests), undo)
        rows = self.model.decode_batch(requests)
        self._tokens.update((seq, len(tokens)) for seq, tokens, _ in requests)
        self._carried.update((seq, size) for seq, _, _ in requests)
        for p in passes:
            p.cache.tokens.extend(p.tokens)  # the mirror follows, as in CachedModel.decode
        self.passes += 1
        return rows

    def _advance(self, run: _Running, rows: np.ndarray | None) -> None:
        run.waiting = None
        try:
            item = next(run.steps) if rows is None else run.steps.send(rows)
            while not isinstance(item, Pass):
                run.events.append(item)
                run.answered += isinstance(item, TokenEvent)
                item = next(run.steps)
            run.waiting = item
            if isinstance(item.cache.model, Lane):
                run.seq = item.cache.model.seq
        except StopIteration:
            self._end(run, None)
        except Exception as exc:
            self._end(run, exc)

    def _throw(self, run: _Running, exc: Exception) -> None:
        try:
            run.steps.throw(exc)
        except Exception as raised:
            self._end(run, raised)
        else:
            self._end(run, exc)

    def _end(self, run: _Running, error: BaseException | None) -> None:
        if run.ended:
            return
        run.ended = True
        run.waiting = None
        if error is not None:
            run.error = error
        self._running.remove(run)
        self._tokens.pop(run.seq, None)
        run.steps.close()
