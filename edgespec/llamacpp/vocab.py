"""A model's vocabulary and templates as llama.cpp reads them: tokenizing, each token's bytes
(for grammars too), the chat template and the metadata."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from edgespec.errors import EdgespecError
from edgespec.text.chat_template import chat_tokens, check_tool_text


class LlamaVocab:
    """The text half of `LlamaModel`: what needs only the loaded model and its vocabulary."""

    path: Path
    n_vocab: int
    _model: Any
    _vocab: Any
    _pieces: dict[int, bytes]

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character)."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._piece(token, special=False)
            self._pieces[token] = piece
        return piece

    @functools.cached_property
    def grammar_tokenizer(self) -> Any:
        """llguidance's view of this vocabulary, for grammars (built once per model)."""
        import llguidance

        pieces, eog = self.grammar_pieces()
        # One end token: once the grammar's text is complete it is then certain, and taken
        # without a target pass (with all of them, the target would be asked which one).
        turn = int(llama_cpp.llama_vocab_eot(self._vocab))
        ends = [turn] if turn >= 0 else [self.eos_token] if self.eos_token >= 0 else eog
        tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        return llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
            tokens=pieces, vocab_ptr=self._vocab, tokenize_fptr=tokenize, eos_token=ends
        )

    def grammar_pieces(self) -> tuple[list[bytes], list[int]]:
        """Every token's bytes as llguidance reads them (as `llguidance.llamacpp` gives them, far
        faster: a byte-level vocabulary's from the file) and the end-of-generation tokens."""
        from edgespec.models.gguf import read_gguf
        from edgespec.models.vocab import byte_level_pieces

        known = byte_level_pieces(read_gguf(self.path), self.n_vocab) or [None] * self.n_vocab
        pieces: list[bytes] = []
        eog: list[int] = []
        for token, piece in enumerate(known):
            if piece is None:
                piece = self._grammar_piece(token)
                if self.is_eog(token):
                    eog.append(token)
            pieces.append(piece)
        return pieces, eog

    def _grammar_piece(self, token: int) -> bytes:
        """A token's text; a special one after a 0xff byte (`llguidance.llamacpp`'s rule)."""
        piece = self._piece(token, special=True)
        attr = llama_cpp.llama_vocab_get_attr(self._vocab, token)
        looks_special = piece.startswith(b"<") and piece.endswith(b">")
        if attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL or (
            attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED and looks_special
        ):
            return b"\xff" + piece
        return piece

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * size)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buf, size, add_special, parse_special
            )
            if n >= 0:
                return list(buf[:n])
            size = -n

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def _piece(self, token: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    @property
    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens as llama.cpp knows them; -1 for one the model lacks."""
        names = ("pre", "suf", "mid", "pad", "rep", "sep")
        return {n: int(getattr(llama_cpp, f"llama_vocab_fim_{n}")(self._vocab)) for n in names}

    @property
    def bos_token(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self._vocab))

    @property
    def eos_token(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self._vocab))

    def metadata(self) -> dict[str, str]:
        meta = {}
        buf = ctypes.create_string_buffer(1 << 16)
        for i in range(llama_cpp.llama_model_meta_count(self._model)):
            n = llama_cpp.llama_model_meta_key_by_index(self._model, i, buf, len(buf))
            key = buf.raw[:n].decode("utf-8", "replace")
            n = llama_cpp.llama_model_meta_val_str_by_index(self._model, i, buf, len(buf))
            meta[key] = buf.raw[: min(n, len(buf))].decode("utf-8", "replace")
        return meta

    @property
    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None
    ) -> list[int]:
        """The conversation rendered by the model's template and tokenized: only the template's
        markers become special tokens. `tools`: OpenAI's tool definitions."""
        check_tool_text(self.tokenize, messages, tools)
        # The template writes BOS itself when the model wants it.
        return chat_tokens(
            functools.partial(self.render_chat, tools=tools), self.tokenize, messages
        )

    def render_chat(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None
    ) -> str:
        """The conversation as the model's own template writes it, ready for an assistant turn."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.chat_template
        if template is None:
            raise EdgespecError(f"{self.path.name} has no chat template; use --raw")
        formatter = Jinja2ChatFormatter(
            template,
            eos_token=self._piece(self.eos_token, special=True).decode("utf-8", "replace"),
            bos_token=self._piece(self.bos_token, special=True).decode("utf-8", "replace"),
        )
        rendered = formatter(messages=list(messages), tools=list(tools) if tools else None)  # type: ignore[arg-type]
        return str(rendered.prompt)
