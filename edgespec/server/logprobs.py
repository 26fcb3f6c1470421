"""Logprobs in OpenAI's two shapes: chat's `logprobs.content` entries, and text completions'
legacy lists. A token is reported with its text: one held back (a possible stop string, half
a UTF-8 character) comes in the chunk that returns it, and one whose text is never returned
(cut by a stop string, the end-of-generation token) is not reported."""

from __future__ import annotations

import codecs
from typing import Any

from edgespec.api import TokenEvent
from edgespec.engine.protocol import Vocab


class Logprobs:
    def __init__(self, vocab: Vocab, *, chat: bool, offset: int = 0) -> None:
        self.vocab = vocab
        self.chat = chat
        self.offset = offset  # text completions: the prompt's characters
        self._chars = codecs.getincrementaldecoder("utf-8")("replace")
        self._held: list[TokenEvent] = []
        self.returned: list[TokenEvent] = []  # every token reported so far

    def feed(self, event: TokenEvent) -> list[TokenEvent]:
        """The tokens whose text this event returns (its own and those held back before it)."""
        if not self.vocab.is_eog(event.token):
            self._held.append(event)
        if not event.text:
            return []
        out, self._held = self._held, []
        self.returned += out
        return out

    def block(self, events: list[TokenEvent]) -> dict[str, Any]:
        """The `logprobs` object of a choice (or a chunk's choice) that returns these tokens;
        call it once per token, in order (text offsets run on)."""
        if self.chat:
            return {"content": [self._entry(e) for e in events]}
        offsets = []
        for e in events:
            offsets.append(self.offset)
            self.offset += len(self._chars.decode(self.vocab.token_bytes(e.token)))
        return {
            "tokens": [self._text(e.token) for e in events],
            "token_logprobs": [e.logprob for e in events],
            # As OpenAI's: the alternatives and the token itself.
            "top_logprobs": [
                {**{self._text(t): p for t, p in e.top_logprobs}, self._text(e.token): e.logprob}
                for e in events
            ],
            "text_offset": offsets,
        }

    def _entry(self, event: TokenEvent) -> dict[str, Any]:
        top = [self._alternative(t, p) for t, p in event.top_logprobs]
        return {**self._alternative(event.token, event.logprob), "top_logprobs": top}

    def _alternative(self, token: int, logprob: float | None) -> dict[str, Any]:
        raw = self.vocab.token_bytes(token)
        return {"token": self._text(token), "logprob": logprob, "bytes": list(raw)}

    def _text(self, token: int) -> str:
        # A token may hold part of a character: `bytes` carries it exactly.
        return self.vocab.token_bytes(token).decode("utf-8", "replace")
