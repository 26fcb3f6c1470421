"""What a greedy draft step's read of its row costs in numpy, part by part, against two ways
tried to read it faster that were not kept (issue 51).

    PYTHONPATH=. python benchmarks/overhead/head_floor.py [--vocab 151936] [--rows 64]
        [--repeats 12] [--model DRAFT.gguf] [--json OUT]

A greedy draft step reads the head of the draft model's row (`drafters.top_one`: the argmax
and its probability among the tokens at least `PROPOSAL_FLOOR` as likely). The row is the one
the model has just written, so here every call is timed right after its row is written into
the buffer, as `overhead.py`'s `InstantModel` writes it (a row of `logit_bank`, rotated; with
`--model`, the draft model's own rows from its greedy answers to proposal_rows.py's prompts):
a row read again from cache, or from a bank larger than the cache, times otherwise
(micro-benchmarks of that kind showed a faster head that a generation did not). Each figure is
the median over `--repeats` of the mean microseconds a call over `--rows` rows, apart for rows
whose head holds at most 64 tokens and the others (flat rows: 4 of the bank's 16); `rows` says
how many of each there were. Operations:

- `top_one`: what the engine does (the head's ids as `flatnonzero` below, then its weights);
- `max`, `compare`: one pass over the row each;
- `flatnonzero`: the head's ids as the engine finds them: the maximum, the comparison, and
  `flatnonzero` of the mask (three passes);
- `words`: the same, the mask's set ids found through its 8-byte words first (one pass over an
  eighth as many items, then the set words' bytes), `flatnonzero` past 128 set words;
- `columns`: the head's ids from column maxima over a (16, n/16) view of the row (one pass),
  which give the maximum and the columns that can hold the head; only those are compared (the
  whole row past an eighth of the columns).

`words` and `columns` were tried in the engine and taken out: faster on the bank's confident
rows, no faster on the real draft model's and slower on its flat ones (the README).

Every alternative is checked to give the head `flatnonzero` gives.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import overhead

from edgespec.engine.drafters import top_one
from edgespec.engine.sampling import PROPOSAL_FLOOR

FLOOR = np.float32(math.log(PROPOSAL_FLOOR))
# A row whose head holds more tokens than this counts as flat: a guess, the size of the bank's
# heads (`logit_bank` raises 64 tokens over the tail).
FLAT = 64


def words(mask: np.ndarray) -> np.ndarray:
    """The set ids of a boolean row through its 8-byte words (`flatnonzero` past 128 of them:
    where the two crossed on masks of 152k with 1 to 5,000 random set bytes, about 250 set,
    timeit on this EPYC, a throwaway check)."""
    hot = np.flatnonzero(mask.view(np.uint64) != 0)
    if len(hot) > 128:
        return np.flatnonzero(mask)
    word, byte = mask.reshape(-1, 8)[hot].nonzero()
    return hot[word] * 8 + byte


def columns(row: np.ndarray) -> np.ndarray:
    """The head's ids by columns: column maxima over a (16, n/16) view (one pass), then the
    columns that can hold the head only (the whole row past an eighth of them)."""
    if len(row) % 16:
        return np.flatnonzero(row >= row.max() + FLOOR)
    peaks = row.reshape(16, -1).max(axis=0)
    floor = peaks.max() + FLOOR
    cand = np.flatnonzero(peaks >= floor)
    if len(cand) > len(peaks) // 8:
        return np.flatnonzero(row >= floor)
    ids = (np.arange(16)[:, None] * len(peaks) + cand).ravel()  # ascending: row-major
    return ids[row[ids] >= floor]


def operations() -> dict[str, Callable[[np.ndarray], object]]:
    return {
        "top_one": top_one,
        "max": lambda row: row.max(),
        "compare": lambda row: row >= np.float32(0.0),
        "flatnonzero": lambda row: np.flatnonzero(row >= row.max() + FLOOR),
        "words": lambda row: words(row >= row.max() + FLOOR),
        "columns": columns,
    }


def bank_rows(n_vocab: int, count: int) -> np.ndarray:
    """Rows of `logit_bank`, each rotated as `InstantModel` writes them."""
    bank = overhead.logit_bank(n_vocab, 16)
    rng = np.random.default_rng(1)
    picks = [(int(rng.integers(16)), int(rng.integers(n_vocab))) for _ in range(count)]
    return np.stack([np.roll(bank[r], -s) for r, s in picks])


def model_rows(path: str, count: int) -> np.ndarray:
    """A draft model's own rows: its greedy answers to proposal_rows.py's prompts, up to
    `count` rows in all, as many from each prompt."""
    from proposal_rows import PROMPTS

    from edgespec.llamacpp.model import LlamaModel, LoadOptions

    model = LlamaModel(path, LoadOptions(n_ctx=1024))
    rows: list[np.ndarray] = []
    for i, prompt in enumerate(PROMPTS):
        model.rewind(0)
        row = model.decode(model.apply_chat_template([{"role": "user", "content": prompt}]))[0]
        while len(rows) < count * (i + 1) // len(PROMPTS):
            rows.append(np.array(row))
            token, _ = top_one(row)
            if model.is_eog(token):
                break
            row = model.decode([token], 1)[0]
    model.close()
    return np.stack(rows)


def measure(rows: np.ndarray, repeats: int) -> dict[str, dict[str, float]]:
    """Each operation on each row, the row written into the buffer just before (as a decode
    leaves it), operations interleaved, the order reversed every other repeat."""
    row = np.empty(rows.shape[1], dtype=np.float32)
    flat = []
    for source in rows:
        row[:] = source
        head = np.flatnonzero(row >= row.max() + FLOOR)
        flat.append(len(head) > FLAT)
        if not (
            np.array_equal(words(row >= row.max() + FLOOR), head)
            and np.array_equal(columns(row), head)
        ):
            raise AssertionError("an alternative gave another head")
    ops = operations()
    times: dict[tuple[str, bool], list[float]] = {}
    for repeat in range(repeats):
        order = list(ops.items()) if repeat % 2 == 0 else list(reversed(ops.items()))
        for name, op in order:
            spent = {False: 0.0, True: 0.0}
            for source, is_flat in zip(rows, flat, strict=True):
                row[:] = source  # as a decode leaves it: just written
                started = time.perf_counter()
                op(row)
                spent[is_flat] += time.perf_counter() - started
            for is_flat in (False, True):
                n = sum(f == is_flat for f in flat)
                if n:
                    times.setdefault((name, is_flat), []).append(spent[is_flat] / n * 1e6)
    out: dict[str, dict[str, float]] = {
        name: {
            kind: statistics.median(times[name, is_flat])
            for kind, is_flat in (("confident", False), ("flat", True))
            if (name, is_flat) in times
        }
        for name in ops
    }
    out["rows"] = {"confident": flat.count(False), "flat": flat.count(True)}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=overhead.VOCAB)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--model", help="a draft GGUF: its own greedy rows instead of the bank's")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    rows = model_rows(args.model, args.rows) if args.model else bank_rows(args.vocab, args.rows)
    results = measure(rows, args.repeats)
    kinds = ("confident", "flat")
    print(f"| us a call | head <= {FLAT} tokens | flat (more) |")
    print("| --- | --- | --- |")
    for name, row in results.items():
        cells = (f"{row[k]:.0f}" if name == "rows" else f"{row[k]:.1f}" for k in kinds if k in row)
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
