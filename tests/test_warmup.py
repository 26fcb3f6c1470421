"""Batch shapes warmed before a round times them (engine/warmup.py): a model that computes on a
GPU runs each new shape once, undone, and nothing a generation gives changes."""

from __future__ import annotations

import pytest

from edgespec.api import Speculator
from edgespec.auto.prior import CostModel
from edgespec.engine import warmup
from edgespec.engine.events import TokenEvent
from tests.fakes import FakeTextModel

FLAT = CostModel({n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 4, 5, 8, 16, 32)}, 0.1)
PROMPTS = ("abcabcabcabd abcabcabcabd abcabc", "dcba dcba dcbadcbadc", "hello world hello")


class Counted(FakeTextModel):
    """A fake model that counts its decodes of each size."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.runs: list[int] = []

    def decode(self, tokens, n_logits=1):  # type: ignore[no-untyped-def]
        self.runs.append(len(tokens))
        return super().decode(tokens, n_logits)

    def decode_batch(self, requests):  # type: ignore[no-untyped-def]
        self.runs.append(sum(len(t) for _, t, _ in requests))
        return super().decode_batch(requests)

    def decode_tree(self, tokens, parents):  # type: ignore[no-untyped-def]
        self.runs.append(-len(tokens))
        return super().decode_tree(tokens, parents)


def _spec(gpu: bool, sequences: int = 1) -> tuple[Speculator, Counted]:
    target = Counted(seed=1, n_ctx=256, tree_width=4, sequences=sequences)
    draft = Counted(seed=1, n_ctx=256, noise=1.0, noise_seed=5, sequences=sequences)
    for model in (target, draft):
        model.warms_shapes = gpu  # type: ignore[attr-defined]
    spec = Speculator(target, draft)
    spec.enable_auto(FLAT, use_model=True, step_s=0.01)
    return spec, target


def _tokens(spec: Speculator, prompt: str, drafter: str) -> list[int]:
    events = spec.stream(prompt, drafter=drafter, max_tokens=60)
    return [e.token for e in events if isinstance(e, TokenEvent)]


@pytest.fixture
def still(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock that never moves: `auto` decides alike with and without the warm-ups' time."""
    from edgespec.engine import generate

    monkeypatch.setattr(generate, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(warmup, "perf_counter", lambda: 0.0)


@pytest.mark.usefixtures("still")
@pytest.mark.parametrize("drafter", ["none", "model", "auto", "auto:trees=1"])
def test_warmed_shapes_change_no_token(drafter: str) -> None:
    """Chains, trees and the draft's catch-ups, each new shape run once more on the 'GPU'."""
    cold, cold_target = _spec(gpu=False)
    warm, target = _spec(gpu=True)
    for prompt in PROMPTS:
        assert _tokens(warm, prompt, drafter) == _tokens(cold, prompt, drafter)
    # One run more for each shape warmed, each the run right before its first timed one.
    warmed = warmup._seen[target]
    assert warmed and len(target.runs) == len(cold_target.runs) + len(warmed)
    for kind, size in warmed:
        first = target.runs.index(-size if kind == "tree" else size)
        assert target.runs[first + 1] == target.runs[first]


def test_a_shared_pass_is_warmed_as_one_batch_and_changes_no_token() -> None:
    alone = [_tokens(_spec(gpu=False)[0], p, "auto") for p in PROMPTS]
    spec, target = _spec(gpu=True, sequences=len(PROMPTS))
    lanes = spec.lanes(len(PROMPTS))
    streams = [
        iter(lane.stream(p, drafter="auto", max_tokens=60))
        for lane, p in zip(lanes, PROMPTS, strict=True)
    ]
    out: list[list[int]] = [[] for _ in PROMPTS]
    live = set(range(len(PROMPTS)))
    while live:
        for i in sorted(live):
            event = next(streams[i], None)
            if event is None:
                live.discard(i)
            elif isinstance(event, TokenEvent):
                out[i].append(event.token)
    assert out == alone
    assert any(kind == "batch" for kind, _ in warmup._seen[target])


def test_a_cpu_model_is_not_warmed() -> None:
    spec, target = _spec(gpu=False)
    before = warmup.spent()
    _tokens(spec, PROMPTS[0], "auto")
    assert warmup.spent() == before and target not in warmup._seen
