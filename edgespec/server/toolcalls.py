"""Tool calls read out of the answer's text as it streams. Only a whole call to a declared tool
whose arguments parse is a call, handed on once whole; anything else is content, so that no
text is lost, no undeclared tool is called, and a stream says what the whole answer says."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from edgespec.server.openai import FunctionCall, ToolCall
from edgespec.server.structured import CLOSE, OPEN

# The start of a call's JSON, as the grammar spells it: what follows is the arguments.
_HEAD = re.compile(r'\s*\{"name": "([A-Za-z0-9_-]{1,64})", "arguments": ')
_TAIL = re.compile(r"\s*\}\s*" + re.escape(CLOSE))
_SCALAR = frozenset("-+.0123456789eEtruefalsn")


@dataclass
class CallPart:
    """A part of the `index`th call: its id and name first (arguments ""), then its arguments."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


@dataclass
class _JsonEnd:
    """Where a JSON value that starts at `at` ends, read as its text arrives: brackets count
    outside strings only (a `}` or a `</tool_call>` inside a string is the string's)."""

    at: int
    depth: int = 0
    quoted: bool = False
    escaped: bool = False
    scalar: bool = False
    found: int | None = None

    def end(self, text: str) -> int | None:
        """The index just past the value, once `text` holds all of it (None: not yet)."""
        if self.found is None:
            self.found = self._scan(text)
        return self.found

    def _scan(self, text: str) -> int | None:
        while self.at < len(text):
            c = text[self.at]
            if self.scalar and c not in _SCALAR:
                return self.at  # a number or literal ends before what follows it
            self.at += 1
            if self.quoted:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.quoted = False
                    if self.depth == 0:
                        return self.at
            elif c == '"':
                self.quoted = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth <= 0:  # below 0: no value at all, which will not parse
                    return self.at if self.depth == 0 else self.at - 1
            elif self.depth == 0 and not c.isspace():
                self.scalar = True
        return None


@dataclass
class ToolCallReader:
    """Feed it the answer's text; it returns content text and `CallPart`s in order. `stops`
    end the content at the first, as the engine cuts plain text (never in a call)."""

    names: Sequence[str] = ()
    stops: Sequence[str] = ()
    calls: list[ToolCall] = field(default_factory=list)
    stopped: bool = field(default=False, init=False)
    _state: str = "text"  # or "call": after a marker
    _buf: str = ""  # text not handed on yet; in a call, what follows its marker
    _gap: str = ""  # the white space before a marker: dropped when a call follows
    _from: int = 0  # where in the buffer a marker may start (past one that was no call's)
    _scan: _JsonEnd | None = None

    def feed(self, text: str) -> list[str | CallPart]:
        if self.stopped:
            return []
        self._buf += text
        out: list[str | CallPart] = []
        while (parts := self._step()) is not None:
            out += parts
        return [p for p in out if p != ""]

    def end(self) -> list[str | CallPart]:
        """What was held back, once the answer has ended: a call cut short is content."""
        if self._state == "call":  # its text, stop strings and all: they are not looked for
            rest = self._gap + OPEN + self._buf
        else:
            rest = self._buf if not self.stopped else ""
        self._buf, self._gap, self._state = "", "", "text"
        return [rest] if rest else []

    def _step(self) -> list[str | CallPart] | None:
        """One step through the buffer: what to hand on (None: wait for more text)."""
        if self.stopped:
            return None
        if self._state == "text":
            return self._text()
        found = _HEAD.match(self._buf)
        if found is None:
            rest = self._buf.lstrip()
            heads = (f'{{"name": "{name}", "arguments": ' for name in self.names)
            return None if any(h.startswith(rest) for h in heads) else self._not_a_call()
        if found.group(1) not in self.names:
            return self._not_a_call()
        return self._arguments(found.group(1), found.end())

    def _text(self) -> list[str | CallPart] | None:
        at = self._buf.find(OPEN, self._from)
        free = self._buf if at < 0 else self._buf[:at]
        stops = [i for i in (free.find(s) for s in self.stops if s) if i >= 0]
        if stops:
            # The text ends at the first stop string, the white space before a call included.
            self.stopped, ready, self._buf = True, free[: min(stops)], ""
            return [ready]
        if at >= 0:
            ready = self._buf[:at].rstrip()
            self._gap, self._buf = self._buf[len(ready) : at], self._buf[at + len(OPEN) :]
            self._state, self._scan, self._from = "call", None, 0
            return [ready]
        # Held back: what may start the marker or a stop string, and white space before it.
        held = max(_held(self._buf, m) for m in (OPEN, *self.stops))
        cut = len(self._buf[: len(self._buf) - held].rstrip())
        ready, self._buf = self._buf[:cut], self._buf[cut:]
        self._from = max(0, self._from - cut)
        return [ready] if ready else None

    def _arguments(self, name: str, start: int) -> list[str | CallPart] | None:
        if self._scan is None:
            self._scan = _JsonEnd(start)
        end = self._scan.end(self._buf)
        if end is None:
            return None
        tail = _TAIL.match(self._buf, end)
        if tail is None:
            rest = self._buf[end:].lstrip()
            closing = rest[1:].lstrip() if rest.startswith("}") else None
            whole = rest == "" or (closing is not None and CLOSE.startswith(closing))
            return None if whole else self._not_a_call()
        arguments = self._buf[start:end]
        try:
            json.loads(arguments)
        except (ValueError, RecursionError):
            return self._not_a_call()
        function = FunctionCall(name=name, arguments=arguments)
        call = ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", function=function)
        self.calls.append(call)
        self._buf, self._gap, self._state = self._buf[tail.end() :], "", "text"
        index = len(self.calls) - 1
        return [CallPart(index, "", call.id, name), CallPart(index, arguments)]

    def _not_a_call(self) -> list[str | CallPart]:
        """The marker was not a call's: it is text again, read as text from there on."""
        self._buf = self._gap + OPEN + self._buf
        self._from = len(self._gap) + 1  # past this marker's start
        self._gap, self._state, self._scan = "", "text", None
        return []


def _held(text: str, marker: str) -> int:
    """How many of `text`'s last characters may be the start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
