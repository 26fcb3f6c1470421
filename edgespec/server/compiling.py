"""A request's grammar compiled once, after the queue check and outside the worker's turn, on
deep-stack threads under a deadline. llguidance cannot stop a compile it has begun: one past
its deadline is answered then and keeps its thread, so at most COMPILE_THREADS use the CPU."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import Any

from edgespec.server.openai import ApiError, busy
from edgespec.server.structured import Structure
from edgespec.text.grammar import Grammar, GrammarConstraint, GrammarError, start_deep

COMPILE_THREADS = 2  # compiles at once (a guess)
# Past any schema a client means to use; hostile ones take longer (docs/tuning.md, Grammar
# compile deadline).
COMPILE_DEADLINE_S = 5.0


def _yield_cpu() -> None:
    """Make this thread the last to get a core: llama.cpp's threads wait for each other each
    token, so one that a compile kept off its core would hold up all of them."""
    with contextlib.suppress(AttributeError, OSError):  # no per-thread priority here
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class CompilesBusy(Exception):
    """Every compile slot stayed taken for the whole deadline."""


class CompileTimeout(GrammarError):
    """A compile still running at its deadline."""


class Compiler:
    """Compiles grammars COMPILE_THREADS at a time, each request's within `deadline_s` (waiting
    included)."""

    def __init__(self) -> None:
        self.deadline_s = COMPILE_DEADLINE_S
        self._slots = threading.BoundedSemaphore(COMPILE_THREADS)

    async def compile(self, grammar: Grammar, tokenizer: Any, deadline: float) -> GrammarConstraint:
        """The grammar's fresh constraint; GrammarError where llguidance refuses it or it does
        not compile by `deadline` (the loop's time), CompilesBusy where no slot came free in
        time."""
        loop = asyncio.get_running_loop()
        while not self._slots.acquire(blocking=False):
            if loop.time() >= deadline:
                raise CompilesBusy
            await asyncio.sleep(0.05)
        result: asyncio.Future[GrammarConstraint] = loop.create_future()

        def settle(outcome: GrammarConstraint | BaseException) -> None:
            if result.done():  # answered at the deadline already
                return
            if isinstance(outcome, BaseException):
                result.set_exception(outcome)
            else:
                result.set_result(outcome)

        def run() -> None:
            _yield_cpu()
            try:
                outcome: GrammarConstraint | BaseException = grammar._compile(tokenizer)
            except BaseException as exc:  # handed to the request, which answers with it
                outcome = exc
            finally:
                self._slots.release()
            with contextlib.suppress(RuntimeError):  # the server stopped: nobody waits for it
                loop.call_soon_threadsafe(settle, outcome)

        if not start_deep(run):  # no thread of that stack here: compiled on the caller's
            self._slots.release()
            return await asyncio.to_thread(grammar._compile, tokenizer)
        try:
            return await asyncio.wait_for(asyncio.shield(result), deadline - loop.time())
        except asyncio.TimeoutError:
            result.cancel()  # its outcome, when it comes, is dropped (see `settle`)
            raise CompileTimeout(
                f"{grammar.label} did not compile within {self.deadline_s:g} s; "
                "simplify it (fewer properties, alternatives or nested definitions)"
            ) from None


async def compile_structure(
    compiler: Compiler, structure: Structure, target: Any
) -> GrammarConstraint | None:
    """The request's grammar compiled once under one deadline (None: it has none); a 400 naming
    its field (where the tools' grammar fails, the tool at fault, found by compiling each
    tool's arguments alone in what is left of the deadline); a 429 where all are busy."""
    if structure.grammar is None:
        return None
    tokenizer = target.grammar_tokenizer
    deadline = asyncio.get_running_loop().time() + compiler.deadline_s
    try:
        return await compiler.compile(structure.grammar, tokenizer, deadline)
    except CompilesBusy:
        raise busy() from None
    except GrammarError as exc:
        raise await _at_fault(compiler, structure, tokenizer, deadline, exc) from exc


async def _at_fault(
    compiler: Compiler,
    structure: Structure,
    tokenizer: Any,
    deadline: float,
    failed: GrammarError,
) -> ApiError:
    """The 400 naming the first tool whose arguments alone fail (else the grammar's field)."""
    for param, grammar in structure.parts:
        try:
            await compiler.compile(grammar, tokenizer, deadline)
        except (CompilesBusy, CompileTimeout):
            break
        except GrammarError as exc:
            return ApiError(400, str(exc), param=param)
    return ApiError(400, str(failed), param=structure.param)
