"""Fake models that spell JSON, with llguidance tokenizers of their vocabularies: grammars run
on them exactly as on a real model, through the real grammar engine."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import llguidance
import numpy as np

from tests.fakes import FakeModel

# A vocabulary that can spell small JSON objects in more than one way ("ab" or "a" "b"), so
# that a grammar's forced text can be tokenized otherwise than the model writes it.
JSON_PIECES = [
    b"{",
    b"}",
    b'"',
    b": ",
    b", ",
    b"a",
    b"b",
    b"ab",
    b"1",
    b"2",
    b"true",
    b"false",
    b'{"a',
    b"x",
    b"\n",
    b"<eos>",
]
JSON_EOS = len(JSON_PIECES) - 1


class _Toy:
    """What llguidance's TokenizerWrapper asks of a tokenizer: greedy longest match."""

    bos_token_id = None

    def __init__(self, pieces: list[bytes], eos: int) -> None:
        self.tokens = pieces
        self.eos_token_id = eos
        self.special_token_ids = [eos]

    def __call__(self, data: bytes | str) -> list[int]:
        raw = data.encode() if isinstance(data, str) else data
        out, i = [], 0
        ordinary = [(j, p) for j, p in enumerate(self.tokens) if j != self.eos_token_id]
        while i < len(raw):
            found = [j for j, p in ordinary if raw.startswith(p, i)]
            if not found:  # bytes no token spells are skipped: only wrapper probes send them
                i += 1
                continue
            best = max(found, key=lambda j: len(self.tokens[j]))
            out.append(best)
            i += len(self.tokens[best])
        return out


def toy_tokenizer(pieces: list[bytes], eos: int) -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Toy(pieces, eos)))


class GrammarModel(FakeModel):
    """A FakeModel over `pieces` (last one: end of generation) with a grammar tokenizer."""

    def __init__(self, pieces: list[bytes] = JSON_PIECES, **kw: object) -> None:
        super().__init__(n_vocab=len(pieces), eog=len(pieces) - 1, **kw)  # type: ignore[arg-type]
        self.pieces = pieces

    def token_bytes(self, token: int) -> bytes:
        return b"" if token == self.eog else self.pieces[token]

    @cached_property
    def grammar_tokenizer(self) -> llguidance.LLTokenizer:
        return toy_tokenizer(self.pieces, len(self.pieces) - 1)

    def text(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode()


# Every printable ASCII character and a line break, pieces of JSON, the tool-call markers (one
# token each, as in Qwen2.5's vocabulary) and the end of generation.
CHAT_PIECES = [
    *(bytes([c]) for c in range(32, 127)),
    b"\n",
    b'{"',
    b'": ',
    b", ",
    b"name",
    b"arguments",
    b"<tool_call>",
    b"</tool_call>",
    b"<eos>",
]


class ChatGrammarModel(GrammarModel):
    """A GrammarModel that tokenizes and renders chats, with tools, in the shape of Qwen2.5's
    template: tool definitions in the system turn, calls as `<tool_call>` JSON `</tool_call>`."""

    chat_template = "... <tool_call> ..."  # what the server looks for: a template with tool calls

    def __init__(self, **kw: object) -> None:
        super().__init__(CHAT_PIECES, **kw)
        self._toy = _Toy(CHAT_PIECES, len(CHAT_PIECES) - 1)

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return list(self._toy(text))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None
    ) -> list[int]:
        text = f"<tools>{json.dumps(tools)}" if tools else ""
        for m in messages:
            calls = "".join(
                f"\n<tool_call>\n{json.dumps(c['function'])}\n</tool_call>"
                for c in m.get("tool_calls", [])
            )
            text += f"<{m['role']}>{m['content']}{calls}"
        return self.tokenize(text + "<assistant>")

    def close(self) -> None:
        pass


class GrammarChatModel(GrammarModel):
    """A GrammarModel that renders chats: the messages' text as the vocabulary spells it
    (bytes it cannot spell skipped), after a `{` that starts every prompt."""

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = "".join(m["content"] for m in messages)
        return [0, *_Toy(self.pieces, self.eog or 0)(text)]


class _SpecialMarkers(_Toy):
    """A `_Toy` whose tool-call markers are special tokens, as in Qwen2.5's vocabulary."""

    def __init__(self, pieces: list[bytes], eos: int) -> None:
        super().__init__(pieces, eos)
        markers = [pieces.index(b"<tool_call>"), pieces.index(b"</tool_call>")]
        self.special_token_ids = [*markers, eos]


class EchoChatModel(ChatGrammarModel):
    """A ChatGrammarModel that, whatever it is asked, wants to write `script` and end, as a
    model that echoes text injected into its prompt does: the script's next token is by far
    its favourite wherever the grammar allows it. `chars`: the script spelled a character a
    token (`<tool_call>` in ordinary tokens); `special`: the markers are special tokens."""

    def __init__(self, script: str, *, chars: bool = False, special: bool = False) -> None:
        super().__init__(seed=5, n_ctx=4096)
        if chars:
            self.script = [CHAT_PIECES.index(bytes([b])) for b in script.encode()]
        else:
            self.script = self._toy(script)
        self.special = special
        self._answer_starts = self._toy("<assistant>")

    @cached_property
    def grammar_tokenizer(self) -> llguidance.LLTokenizer:
        eos = len(CHAT_PIECES) - 1
        toy = _SpecialMarkers(CHAT_PIECES, eos) if self.special else _Toy(CHAT_PIECES, eos)
        return llguidance.LLTokenizer(llguidance.TokenizerWrapper(toy))

    def logits_for(self, context: Sequence[int]) -> np.ndarray:
        row = super().logits_for(context).copy()
        mark, at = self._answer_starts, len(context)
        while at >= len(mark) and list(context[at - len(mark) : at]) != mark:
            at -= 1
        written = len(context) - at
        row[self.script[written] if written < len(self.script) else len(CHAT_PIECES) - 1] += 100.0
        return row
