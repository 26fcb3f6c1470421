"""Pair compatibility from GGUF metadata, with llama.cpp's rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.errors import IncompatibleError
from edgespec.models.compat import check_compatible, incompatibility
from edgespec.models.gguf import read_gguf
from tests.conftest import RealPair, edgespec
from tests.gguf_files import write_vocab_gguf

pytestmark = pytest.mark.real


def test_the_real_qwen_pair_is_compatible(real_pair: RealPair, isolated: dict[str, str]) -> None:
    target, draft = read_gguf(real_pair.target), read_gguf(real_pair.draft)
    assert incompatibility(target, draft) is None
    assert target.n_vocab == draft.n_vocab == 151936
    assert (target.bos_id, target.eos_id, target.add_bos) == (151643, 151645, False)
    res = edgespec("check", str(real_pair.target), str(real_pair.draft), env=isolated)
    assert res.returncode == 0 and res.stdout.startswith("compatible:")


def test_qwen_and_smollm2_are_refused(
    real_pair: RealPair, small_model: Path, isolated: dict[str, str]
) -> None:
    # Neither adds BOS or EOS itself, so (as in llama.cpp) their ids are not compared; the
    # vocabularies are what differ.
    with pytest.raises(
        IncompatibleError, match="vocabulary sizes differ by more than 128: target 151936"
    ):
        check_compatible(read_gguf(real_pair.target), read_gguf(small_model))
    res = edgespec("check", str(real_pair.target), str(small_model), env=isolated)
    assert (
        res.returncode == 1 and "cannot speculate" in res.stderr and "Traceback" not in res.stderr
    )
    # The pair is refused by `run` too, before any weights are loaded.
    res = edgespec(
        "run",
        "hi",
        "--target",
        str(real_pair.target),
        "--draft",
        str(small_model),
        "--drafter",
        "model",
        env=isolated,
    )
    assert res.returncode == 1 and "cannot speculate" in res.stderr


def test_one_changed_token_is_named(
    real_pair: RealPair, tmp_path: Path, isolated: dict[str, str]
) -> None:
    draft = read_gguf(real_pair.draft)
    tokens = list(draft.tokens)
    tokens[4242] = b"edgespec"
    changed = write_vocab_gguf(
        tmp_path / "changed.gguf",
        tokens,
        vocab_type=draft.vocab_type,
        bos=draft.bos_id,
        eos=draft.eos_id,
        add_bos=draft.add_bos,
        arch="qwen2",
    )
    original = draft.tokens[4242].decode()
    assert incompatibility(read_gguf(real_pair.target), read_gguf(changed)) == (
        f"token 4242 differs: target {original!r}, draft 'edgespec'"
    )
    res = edgespec("check", str(real_pair.target), str(changed), env=isolated)
    assert res.returncode == 1 and "token 4242 differs" in res.stderr


def test_vocabulary_rules(tmp_path: Path) -> None:
    base = [f"t{i}".encode() for i in range(300)]
    a = read_gguf(write_vocab_gguf(tmp_path / "a.gguf", base))
    # Up to 128 extra tokens are accepted (Qwen2.5 7B vs 0.5B), more are not.
    assert incompatibility(a, read_gguf(write_vocab_gguf(tmp_path / "b.gguf", base[:172]))) is None
    assert "differ by more than 128" in str(
        incompatibility(a, read_gguf(write_vocab_gguf(tmp_path / "c.gguf", base[:171])))
    )
    # Tokens below 5 are not compared (llama.cpp's rule).
    assert (
        incompatibility(a, read_gguf(write_vocab_gguf(tmp_path / "d.gguf", [b"x", *base[1:]])))
        is None
    )
    assert "vocabulary type" in str(
        incompatibility(
            a, read_gguf(write_vocab_gguf(tmp_path / "e.gguf", base, vocab_type="llama"))
        )
    )
    # BOS/EOS ids are compared only where the target adds the token (llama.cpp's rule) ...
    assert incompatibility(a, read_gguf(write_vocab_gguf(tmp_path / "f.gguf", base, eos=7))) is None
    assert incompatibility(a, read_gguf(write_vocab_gguf(tmp_path / "g.gguf", base, bos=9))) is None
    # ... and then they must agree, as must the add flags themselves.
    adds = read_gguf(write_vocab_gguf(tmp_path / "h.gguf", base, add_bos=True, add_eos=True))
    other_bos = write_vocab_gguf(tmp_path / "i.gguf", base, add_bos=True, add_eos=True, bos=9)
    other_eos = write_vocab_gguf(tmp_path / "j.gguf", base, add_bos=True, add_eos=True, eos=7)
    assert "bos_token_id differs: target 1, draft 9" in str(
        incompatibility(adds, read_gguf(other_bos))
    )
    assert "eos_token_id differs: target 2, draft 7" in str(
        incompatibility(adds, read_gguf(other_eos))
    )
    assert "add_bos_token differs" in str(incompatibility(a, adds))
