"""What a draft model whose output layer scores only part of the vocabulary would buy (FR-Spec,
Zhao et al. 2025: the draft's head restricted to the most frequent tokens; the target still
verifies, so the output is unchanged). Not built: this measures the draft's output layer and
replays `auto` with a cheaper draft that can no longer propose the tokens left out.

    PYTHONPATH=. python benchmarks/heavy/replay/short_head.py OUTPUTS CALIBRATION DRAFT_GGUF

The head's share of a draft step is measured on DRAFT_GGUF (a one-token decode with its logits
against one without: llama.cpp then skips the output layer). The kept tokens are the first N
ids, Qwen's BPE merge order standing in for a frequency ranking, plus the special tokens; where
the draft's first choice is left out its second takes its place, at the probability it then
has, and where both are, the draft offers a token the target does not take. The draft's step
cost falls by the head's share times the share of the vocabulary left out. Its reading of the
context is left as it was (a real short-vocabulary draft would also lose the rare tokens'
input embeddings: this leans high).
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from carry import Device, auto_and_oracle, by_kind, kinds_of
from draft_head import decode_s, warmed

from edgespec.llamacpp.model import LlamaModel, LoadOptions

VOCAB = 151936  # the 0.5B draft's
SPECIAL = 151643  # Qwen2.5's special tokens start here
LEFT_OUT = 151642  # an id no output holds, for "the draft offers a token the target does not take"


def head_share(path: str, repeats: int = 6) -> float:
    """The output layer's share of a one-token decode of the model at `path` (medians)."""
    model = warmed(LlamaModel(path, LoadOptions(n_ctx=1024)))
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(repeats):
        for n_logits in (0, 1):  # interleaved
            times[n_logits].append(decode_s(model, n_logits))
    model.close()
    without, with_head = statistics.median(times[0]), statistics.median(times[1])
    return (with_head - without) / with_head


def cut(run: dict[str, Any], kept: int) -> dict[str, Any]:
    """`run` with a draft that scores only ids below `kept` and the special tokens."""

    def known(token: int) -> bool:
        return token < kept or token >= SPECIAL

    rows = []
    for first, second, p1, p2 in run["draft"]:
        if known(first):
            rows.append([first, second if known(second) else LEFT_OUT, p1, p2])
        elif known(second):
            rows.append([second, LEFT_OUT, min(0.999, p2 / max(1e-6, 1.0 - p1)), 0.0])
        else:
            rows.append([LEFT_OUT, LEFT_OUT - 1, 0.1, 0.05])
    run = copy.deepcopy(run)
    run["draft"] = rows
    return run


def main() -> None:
    runs = json.loads(Path(sys.argv[1]).read_text())
    cal = json.loads(Path(sys.argv[2]).read_text())
    share = head_share(sys.argv[3])
    print(f"the output layer: {share:.1%} of a draft step (one token, {sys.argv[3]})")
    tau = {int(n): v for n, v in cal["tau"].items()}
    draft_tau = {int(n): v for n, v in cal["draft_tau"].items()}
    c = cal["draft_step_s"] / cal["target_step_s"]
    kinds = kinds_of(runs)
    outs = [t for run in runs for t in run["out"]]
    for kept in (None, 65536, 32768, 16384):
        cheaper = c if kept is None else c * (1.0 - share * (1.0 - kept / VOCAB))
        device: Device = (tau, draft_tau, cheaper)
        these = runs if kept is None else [cut(run, kept) for run in runs]
        left = 0.0 if kept is None else sum(kept <= t < SPECIAL for t in outs) / len(outs)
        for name, speeds in auto_and_oracle(these, device):
            print(
                f"kept {kept or VOCAB:6d} (output tokens left out {left:.1%}), c {cheaper:.3f}, "
                f"{name:6s} {by_kind(speeds, kinds)}"
            )


if __name__ == "__main__":
    main()
