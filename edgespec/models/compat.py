"""Can this draft speculate for this target? llama.cpp's rule, checked from GGUF metadata
before any weights are loaded."""

from __future__ import annotations

from edgespec.errors import IncompatibleError
from edgespec.models.gguf import GGUFInfo

MAX_VOCAB_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID


def incompatibility(target: GGUFInfo, draft: GGUFInfo) -> str | None:
    """The first reason the pair cannot speculate together, or None when it can."""
    fields = [
        ("tokenizer.ggml.model (vocabulary type)", target.vocab_type, draft.vocab_type),
        ("tokenizer.ggml.add_bos_token", target.add_bos, draft.add_bos),
        ("tokenizer.ggml.add_eos_token", target.add_eos, draft.add_eos),
    ]
    # BOS/EOS ids matter only where the models put them into the text themselves.
    if target.add_bos:
        fields.append(("tokenizer.ggml.bos_token_id", target.bos_id, draft.bos_id))
    if target.add_eos:
        fields.append(("tokenizer.ggml.eos_token_id", target.eos_id, draft.eos_id))
    for name, t, d in fields:
        if t != d:
            return f"{name} differs: target {t!r}, draft {d!r}"
    if abs(target.n_vocab - draft.n_vocab) > MAX_VOCAB_DIFFERENCE:
        return (
            f"vocabulary sizes differ by more than {MAX_VOCAB_DIFFERENCE}: "
            f"target {target.n_vocab}, draft {draft.n_vocab}"
        )
    for i in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        if target.tokens[i] != draft.tokens[i]:
            t_text = target.tokens[i].decode("utf-8", "replace")
            d_text = draft.tokens[i].decode("utf-8", "replace")
            return f"token {i} differs: target {t_text!r}, draft {d_text!r}"
    return None


def check_compatible(target: GGUFInfo, draft: GGUFInfo) -> None:
    reason = incompatibility(target, draft)
    if reason:
        raise IncompatibleError(
            f"draft {draft.path.name} cannot speculate for target {target.path.name}: {reason}"
        )
