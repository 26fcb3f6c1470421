"""Token bytes read from a GGUF file's vocabulary are llama.cpp's: for every token of both
default models (real tier), and, on a hand-made vocabulary, which tokens are left to llama.cpp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgespec.models.gguf import GGUFInfo
from edgespec.models.vocab import NORMAL, byte_level_pieces
from tests.conftest import RealPair

CONTROL, USER_DEFINED = 3, 4


def info(tokens: list[str], types: list[int], model: str = "gpt2", **ids: int) -> GGUFInfo:
    metadata = {
        "tokenizer.ggml.model": model,
        "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
        **{f"tokenizer.ggml.{name}_token_id": value for name, value in ids.items()},
    }
    return GGUFInfo(Path("x.gguf"), 3, metadata, [t.encode() for t in tokens])


def test_byte_level_tokens_are_decoded_and_special_looking_ones_left_to_llama_cpp() -> None:
    vocab = info(
        ["Hello", "Ġworld", "ĊĊ", "Ã©", "<|im_end|>", "</s>", "end", "ĠĀ", "é"],
        [NORMAL, NORMAL, NORMAL, NORMAL, CONTROL, NORMAL, NORMAL, NORMAL, USER_DEFINED],
        eos=6,
    )
    assert byte_level_pieces(vocab, 9) == [
        b"Hello",
        b" world",
        b"\n\n",
        "é".encode(),  # two bytes, each spelled as one character
        None,  # special
        None,  # ordinary, but llama.cpp may make it special (end of generation)
        None,  # the metadata's end of text
        b" \x00",
        None,  # user-defined: llama.cpp spells it as it is
    ]


@pytest.mark.parametrize(
    ("vocab", "n_vocab"),
    [
        (info(["a", "b"], [NORMAL, NORMAL], model="llama"), 2),  # SentencePiece: llama.cpp's
        (info(["a", "b"], [NORMAL, NORMAL]), 3),  # llama.cpp counts otherwise
        (info(["a", "b"], [NORMAL]), 2),  # a token type missing
        (info(["a", "b\n"], [NORMAL, NORMAL]), 2),  # not byte-level spelling
        (info(["a", "€"], [NORMAL, NORMAL]), 2),
    ],
)
def test_other_vocabularies_are_left_to_llama_cpp(vocab: GGUFInfo, n_vocab: int) -> None:
    assert byte_level_pieces(vocab, n_vocab) is None


@pytest.mark.real
@pytest.mark.filterwarnings("ignore:llama_token_get_attr:DeprecationWarning")  # the reference's
def test_the_grammar_tokenizer_is_llguidances_own_for_both_default_models(
    real_pair: RealPair,
) -> None:
    import llama_cpp
    import llguidance
    from llguidance.llamacpp import lltokenizer_from_vocab

    from edgespec.llamacpp.model import LlamaModel, LoadOptions
    from edgespec.text.grammar import Grammar

    grammar = Grammar.json_schema(
        {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}
    )
    for path in (real_pair.target, real_pair.draft):
        model = LlamaModel(path, LoadOptions(n_ctx=256))
        try:
            eog = [t for t in range(model.n_vocab) if model.is_eog(t)]
            assert model.grammar_pieces()[1] == eog
            fast = model.grammar_tokenizer
            # a grammar ends with the end of a turn alone (<|im_end|> in Qwen2.5)
            assert fast.eos_tokens == [int(llama_cpp.llama_vocab_eot(model._vocab))]
            slow = lltokenizer_from_vocab(
                model._vocab, n_vocab=model.n_vocab, eos_token=fast.eos_tokens
            )
            for token in range(model.n_vocab):
                assert fast.decode_bytes([token]) == slow.decode_bytes([token]), token
                assert fast.is_special_token(token) == slow.is_special_token(token), token
            text = model.tokenize('{"name": "Ann", "n": 12}', add_special=False)
            matchers = [llguidance.LLMatcher(t, grammar.source) for t in (fast, slow)]
            for token in [*text, None]:
                fast_mask, slow_mask = (m.compute_bitmask() for m in matchers)
                assert fast_mask == slow_mask
                for matcher in matchers:
                    if token is not None:
                        assert matcher.consume_token(token)
        finally:
            model.close()
