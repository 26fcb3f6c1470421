"""The llama.cpp adapter on the real target model."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.engine.text import Utf8Stream

pytestmark = pytest.mark.real


def test_batch_decode_matches_token_by_token(loaded) -> None:  # type: ignore[no-untyped-def]
    model = loaded.target
    prompt = model.tokenize(
        'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n', add_special=False
    )
    model.rewind(0)
    single = np.stack([model.decode([t], 1)[0] for t in prompt])
    model.rewind(0)
    batch = model.decode(prompt, len(prompt))
    assert batch.shape == (len(prompt), model.n_vocab)
    # llama.cpp's batched and single-token kernels round differently (measured here: mean
    # |diff| 0.06-0.11, max 0.65 against a spread of about 2.3): small next to the logits'
    # spread, and the same top token nearly everywhere. A wrong position or row would be far off.
    diff = np.abs(batch - single)
    spread = single.std(axis=1)
    assert float((diff.max(axis=1) / spread).max()) < 0.4
    assert float((diff.mean(axis=1) / spread).max()) < 0.06
    assert np.mean(batch.argmax(1) == single.argmax(1)) >= 0.9
    model.rewind(0)


def test_truncate_and_redecode_reproduces_the_logits(loaded) -> None:  # type: ignore[no-untyped-def]
    model = loaded.target
    tokens = model.tokenize(
        "import numpy as np\nx = np.arange(10)\nprint(x.sum())", add_special=False
    )
    model.rewind(0)
    model.decode(tokens[:5], 0)
    first = model.decode(tokens[5:], len(tokens) - 5)
    model.rewind(5)
    assert model.n_past == 5
    again = model.decode(tokens[5:], len(tokens) - 5)
    np.testing.assert_allclose(again, first, rtol=0, atol=1e-4)
    model.rewind(0)


def test_only_requested_rows_come_back(loaded) -> None:  # type: ignore[no-untyped-def]
    model = loaded.target
    tokens = model.tokenize("a b c d e f", add_special=False)
    model.rewind(0)
    assert model.decode(tokens, 0).shape == (0, model.n_vocab)
    model.rewind(0)
    last2 = model.decode(tokens, 2)
    model.rewind(0)
    full = model.decode(tokens, len(tokens))
    np.testing.assert_allclose(last2, full[-2:], atol=1e-4)
    model.rewind(0)


def test_detokenizer_streams_multibyte_characters(loaded) -> None:  # type: ignore[no-untyped-def]
    model = loaded.target
    text = "héllo wörld — 你好，世界 🎉🚀 ok"
    tokens = model.tokenize(text, add_special=False)
    pieces = [model.token_bytes(t) for t in tokens]
    split = [p for p in pieces if _broken(p)]
    assert split, "the text should contain tokens that are parts of a UTF-8 character"
    stream = Utf8Stream()
    chunks = [stream.feed(p) for p in pieces] + [stream.flush()]
    assert "".join(chunks) == text
    assert all("\ufffd" not in c for c in chunks)
    assert model.detokenize(tokens) == text


def _broken(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_chat_template_and_metadata(loaded) -> None:  # type: ignore[no-untyped-def]
    model = loaded.target
    tokens = model.apply_chat_template([{"role": "user", "content": "hi"}])
    text = b"".join(model._piece(t, special=True) for t in tokens).decode()
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert model.metadata()["general.architecture"] == "qwen2"
    assert model.is_eog(151645) and not model.is_eog(tokens[-1])


def test_prompts_longer_than_one_batch_are_decoded_in_chunks(loaded) -> None:  # type: ignore[no-untyped-def]
    model = loaded.target
    tokens = model.tokenize("word " * 700, add_special=False)
    assert len(tokens) > 512  # the batch size the adapter uses
    model.rewind(0)
    last = model.decode(tokens, 1)
    assert model.n_past == len(tokens) and last.shape == (1, model.n_vocab)
    model.rewind(0)


def test_a_tree_decodes_each_path_as_its_own_sequence(loaded) -> None:  # type: ignore[no-untyped-def]
    """Every row of a tree gets the logits of its own path: those of a chain decoded in a batch
    of the same size (the same kernels), padded after the path, and far from any other path's.
    Keeping a branch that is not in sequence 0 leaves the cache as if only that path had been
    decoded."""
    model = loaded.target
    assert model.tree_width >= 4
    context = model.tokenize("def area(radius):\n    return", add_special=False)
    # root -> 100 -> 200 ; root -> 300 -> 400 ; 300 -> 500 ; 100 -> 600
    tokens, parents = [context[-1], 100, 200, 300, 400, 500, 600], [-1, 0, 1, 0, 3, 3, 1]
    paths = {0: [], 1: [100], 2: [100, 200], 3: [300], 4: [300, 400], 5: [300, 500], 6: [100, 600]}
    model.rewind(0)
    model.decode(context[:-1], 0)
    base = model.n_past
    timed, decodes = model.decode_s, model.decodes
    tree = model.decode_tree(tokens, parents)
    assert model.decode_s > timed and model.decodes == decodes + 1  # bench's time in llama.cpp
    model.rewind(base)
    chains = {}
    for row, path in paths.items():
        padded = [context[-1], *path, *range(1, 7 - len(path))]
        chains[row] = model.decode(padded, len(padded))[len(path)]
        model.rewind(base)
    for row in paths:
        spread = float(chains[row].std())
        own = float(np.abs(tree[row] - chains[row]).max()) / spread
        # Measured: 0 where the path's cells lie in chain order, 0.16-0.21 where they do not
        # (attention sums over the cells in another order); another path: 3.8-7.5.
        others = min(float(np.abs(tree[row] - chains[o]).max()) / spread for o in paths if o != row)
        assert own < 0.4 and others > 5 * own, (row, own, others)
        assert tree[row].argmax() == chains[row].argmax()
    model.decode_tree(tokens, parents)
    model.keep_path([0, 3, 5])
    assert model.n_past == base + 3
    after = model.decode([1000, 2000, 3000, 4000], 4)
    model.rewind(base)
    alone = model.decode([context[-1], 300, 500, 1000, 2000, 3000, 4000], 4)
    assert float((np.abs(after - alone).max(axis=1) / alone.std(axis=1)).max()) < 0.4
    assert (after.argmax(1) == alone.argmax(1)).all()
    model.rewind(0)


def test_lent_rows_are_the_copied_rows_until_the_next_decode(loaded) -> None:  # type: ignore[no-untyped-def]
    """The engine's decodes borrow llama.cpp's buffer (decode_lent): the same rows a copying
    decode returns, chains and trees, read-only, and no copy of them is made."""
    model = loaded.target
    prompt = model.tokenize("def area(radius):\n    return 3.14 *", add_special=False)
    model.rewind(0)
    model.decode(prompt[:-4], 0)
    base = model.n_past
    copied = model.decode(prompt[-4:], 3)
    model.rewind(base)
    lent = model.decode_lent(prompt[-4:], 3)
    assert not lent.flags.writeable and not lent.flags.owndata
    np.testing.assert_array_equal(lent, copied)
    model.rewind(base)
    tokens, parents = [prompt[-4], 100, 200, 300], [-1, 0, 1, 0]
    tree = model.decode_tree(tokens, parents)
    model.rewind(base)
    lent_tree = model.decode_tree_lent(tokens, parents)
    assert not lent_tree.flags.owndata
    np.testing.assert_array_equal(lent_tree, tree)
    model.rewind(0)


def test_warming_each_shape_first_changes_no_greedy_token(loaded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """On a GPU each new batch shape runs once, undone, before a round times it: llama.cpp
    writes the same cells again, so the answer is the one a CPU (never warmed) gives. Forced on
    here, for chains, trees and the draft model's catch-ups."""
    from edgespec.engine import warmup

    prompt = "Write a Python function that checks whether a string is a palindrome."
    loaded.session.reset()
    plain = {d: loaded.generate(prompt, drafter=d, max_tokens=40) for d in ("none", "model")}
    for model in (loaded.target, loaded.draft):
        monkeypatch.setattr(model, "warms_shapes", True)
    loaded.session.reset()
    for drafter in ("none", "model", "auto"):
        assert loaded.generate(prompt, drafter=drafter, max_tokens=40) == plain["none"], drafter
    assert plain["model"] == plain["none"]
    assert warmup._seen[loaded.target] and warmup._seen[loaded.draft]
