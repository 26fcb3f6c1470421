"""Fake models that spell JSON, with llguidance tokenizers of their vocabularies: grammars run
on them exactly as on a real model, through the real grammar engine."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import llguidance

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


class GrammarTextModel(GrammarModel):
    """A GrammarModel that also takes text prompts and chats, as `edgespec bench` gives them."""

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return [ord(ch) % (self.n_vocab - 1) for ch in text]  # never the end of generation

    def apply_chat_template(self, messages: list[dict[str, str]]) -> list[int]:
        return self.tokenize("".join(m["content"] for m in messages))

    def detokenize(self, tokens: list[int]) -> str:
        return self.text(tokens)

    def close(self) -> None:
        pass


class GrammarChatModel(GrammarModel):
    """A GrammarModel that renders chats: the messages' text as the vocabulary spells it
    (bytes it cannot spell skipped), after a `{` that starts every prompt."""

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = "".join(m["content"] for m in messages)
        return [0, *_Toy(self.pieces, self.eog or 0)(text)]
