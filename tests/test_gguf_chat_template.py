"""A family edgespec has no code for chats with its own template: the GGUF's
tokenizer.chat_template is rendered by jinja (llama-cpp-python's Jinja2ChatFormatter), not
matched against llama.cpp's built-in list, which does not know it."""

from __future__ import annotations

import ctypes
from pathlib import Path

import gguf
import numpy as np
import pytest

# A template no built-in of llama.cpp matches: turns in double angle brackets.
TEMPLATE = (
    "{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }};{% endfor %}"
    "{% if add_generation_prompt %}<<assistant>>{% endif %}"
)


def _byte_spelling() -> list[str]:
    """GPT-2's byte-level alphabet: each byte as one printable character."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    spell = {b: chr(b) for b in printable} | {b: chr(0x100 + i) for i, b in enumerate(others)}
    return [spell[b] for b in range(256)]


def tiny_model(path: Path, template: str) -> Path:
    """A one-layer llama of random weights that llama.cpp loads: 256 byte tokens, BOS, EOS."""
    n_embd, n_ff, n_head = 32, 64, 4
    tokens = [*_byte_spelling(), "<s>", "</s>"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3, 3])
    w.add_token_merges([f"{tokens[0x61]} {tokens[0x62]}"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    w.add_add_bos_token(False)
    w.add_chat_template(template)
    rng = np.random.default_rng(0)

    def weights(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    weights("token_embd.weight", len(tokens), n_embd)
    for norm in ("output_norm", "blk.0.attn_norm", "blk.0.ffn_norm"):
        w.add_tensor(f"{norm}.weight", np.ones(n_embd, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        weights(f"blk.0.{name}.weight", n_embd, n_embd)
    weights("blk.0.ffn_gate.weight", n_ff, n_embd)
    weights("blk.0.ffn_up.weight", n_ff, n_embd)
    weights("blk.0.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_llamacpps_built_in_templates_do_not_know_this_one() -> None:
    import llama_cpp

    message = llama_cpp.llama_chat_message(role=b"user", content=b"hi")
    chat = (llama_cpp.llama_chat_message * 1)(message)
    buf = ctypes.create_string_buffer(256)
    assert llama_cpp.llama_chat_apply_template(TEMPLATE.encode(), chat, 1, True, buf, 256) < 0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    path = tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.gguf", TEMPLATE)
    model = LlamaModel(path, LoadOptions(n_ctx=128))
    yield model
    model.close()


def test_the_files_own_template_renders_the_chat(tiny) -> None:  # type: ignore[no-untyped-def]
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert tiny.chat_template == TEMPLATE
    assert tiny.render_chat(messages) == "<<system>>be brief;<<user>>hi;<<assistant>>"
    tokens = tiny.apply_chat_template(messages)
    assert bytes(tokens).decode() == "<<system>>be brief;<<user>>hi;<<assistant>>"
