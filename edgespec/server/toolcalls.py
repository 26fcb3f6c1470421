"""Tool calls read out of the answer's text as it streams: `<tool_call>` then
`{"name": ..., "arguments": {...}}` then `</tool_call>`, the format the grammar holds the model
to (structured.py). Text before the first call is the message's content; each call becomes
OpenAI's `tool_calls` entry, its arguments handed on in fragments as they are written."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from edgespec.server.structured import CLOSE, OPEN

# The start of a call's JSON, as the grammar spells it: what follows is the arguments.
_HEAD = re.compile(r'\s*\{"name": "([A-Za-z0-9_-]+)", "arguments": ')


@dataclass
class CallPart:
    """A part of the `index`th call: its id and name first (arguments ""), then fragments."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


@dataclass
class Call:
    id: str
    name: str
    arguments: str = ""


@dataclass
class ToolCallReader:
    """Feed it the answer's text; it returns content text and `CallPart`s in order."""

    calls: list[Call] = field(default_factory=list)
    _state: str = "text"  # text, head (in a call, before its arguments), args, between
    _buf: str = ""

    def feed(self, text: str) -> list[str | CallPart]:
        self._buf += text
        out: list[str | CallPart] = []
        while (part := self._step()) is not None:
            if part:
                out.append(part)
        return out

    def end(self) -> list[str | CallPart]:
        """What was held back, once the answer has ended (a call cut short keeps what it has)."""
        rest, self._buf = self._buf, ""
        if self._state == "text" and rest:
            return [rest]
        if self._state == "args" and rest:
            self.calls[-1].arguments += rest
            return [CallPart(len(self.calls) - 1, rest)]
        return []

    def _step(self) -> str | CallPart | None:
        """One step through the buffer: something to hand on ("" for nothing), or None when
        the buffer must wait for more text."""
        if self._state == "text":
            return self._text()
        if self._state == "between":
            self._buf = self._buf.lstrip()
            if not self._buf.startswith(OPEN):
                return None
            self._buf, self._state = self._buf[len(OPEN) :], "head"
            return ""
        if self._state == "head":
            return self._head()
        return self._arguments()

    def _text(self) -> str | None:
        at = self._buf.find(OPEN)
        if at >= 0:
            # The line break before the first call separates it from the text.
            text, self._buf, self._state = (
                self._buf[:at].rstrip(),
                self._buf[at + len(OPEN) :],
                "head",
            )
            return text
        # Held back: what may start the marker, and the line break that may come before it.
        cut = len(self._buf[: len(self._buf) - _held(self._buf, OPEN)].rstrip())
        ready, self._buf = self._buf[:cut], self._buf[cut:]
        return ready or None

    def _head(self) -> CallPart | None:
        found = _HEAD.match(self._buf)
        if found is None:
            return None
        call = Call(f"call_{uuid.uuid4().hex[:24]}", found.group(1))
        self.calls.append(call)
        self._buf, self._state = self._buf[found.end() :], "args"
        return CallPart(len(self.calls) - 1, "", call.id, call.name)

    def _arguments(self) -> CallPart | str | None:
        at = self._buf.find(CLOSE)
        if at >= 0:
            # The call's own closing brace ends the text before the marker.
            ready = self._buf[:at].rstrip().removesuffix("}")
            self._buf, self._state = self._buf[at + len(CLOSE) :], "between"
            if not ready:
                return ""
        else:
            brace = self._buf.rfind("}")
            hold = brace >= 0 and CLOSE.startswith(self._buf[brace + 1 :].lstrip())
            cut = brace if hold else len(self._buf)
            ready, self._buf = self._buf[:cut], self._buf[cut:]
            if not ready:
                return None
        self.calls[-1].arguments += ready
        return CallPart(len(self.calls) - 1, ready)


def _held(text: str, marker: str) -> int:
    """How many of `text`'s last characters may be the start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
