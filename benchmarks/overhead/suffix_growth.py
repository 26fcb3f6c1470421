"""Whether `auto`'s suffix lookups cost more as the conversation grows, on real text: Python
files of the standard library tokenized by the default pair's tokenizer, the session's earlier
texts growing, the lookups timed on the next text.

    PYTHONPATH=. python benchmarks/overhead/suffix_growth.py [--history 1000,8000,32000]
        [--positions 400] [--repeats 5] [--model DRAFT.gguf]

For each history size H: a suffix drafter whose session holds H tokens of earlier files (the
earlier turns of a coding session), then a new file read as the live context, one token a
round: each round's `offer` (the lookups a draft of up to 16 tokens makes) and `commit` timed
over `--positions` rounds; the median of `--repeats` runs, in microseconds of CPU a round. On
random tokens (the instant fakes of overhead.py) every n-gram has one follower and this never
shows; on real code a short n-gram's followers number in the hundreds to thousands.
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

from edgespec.auto.suffix import SuffixDrafter
from edgespec.llamacpp.model import LlamaModel, LoadOptions
from edgespec.models import files
from edgespec.models.registry import load_registry

FILES = ("argparse.py", "typing.py", "inspect.py", "dataclasses.py", "pathlib.py", "ast.py")


def corpus(model: LlamaModel) -> list[int]:
    """The standard library files above, tokenized one after another."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out: list[int] = []
    for name in FILES:
        out += model.tokenize((stdlib / name).read_text(), add_special=False, parse_special=False)
    return out


def rounds_cost(history: list[int], live: list[int], positions: int) -> float:
    """CPU microseconds per round of the lookups and commits of a drafter on `live`, after a
    session of `history` (earlier texts of 2,000 tokens each)."""
    past = [history[i : i + 2000] for i in range(0, len(history), 2000)]
    drafter = SuffixDrafter(past=past)
    context = list(live[:64])
    drafter.begin(context)
    started = time.process_time()
    for token in live[64 : 64 + positions]:
        drafter.offer(context, 16)
        context.append(token)
        drafter.commit(context)
    return (time.process_time() - started) / positions * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", default="1000,8000,32000")
    parser.add_argument("--positions", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", help="a GGUF whose tokenizer to use (default: the draft's)")
    args = parser.parse_args(argv)
    path = args.model or files.fetch(load_registry().default_pair.draft).path
    model = LlamaModel(path, LoadOptions(n_ctx=256))
    tokens = corpus(model)
    model.close()
    sizes = [int(h) for h in args.history.split(",")]
    live = tokens[-(args.positions + 64) :]
    earlier = tokens[: -(args.positions + 64)]
    if max(sizes) > len(earlier):
        raise SystemExit(f"the corpus has {len(earlier)} tokens of history, not {max(sizes)}")
    runs: dict[int, list[float]] = {h: [] for h in sizes}
    for repeat in range(args.repeats):
        for h in sizes if repeat % 2 == 0 else list(reversed(sizes)):
            runs[h].append(rounds_cost(earlier[-h:], live, args.positions))
    for h in sizes:
        print(f"history {h:6d} tokens: {statistics.median(runs[h]):7.1f} us a round")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
