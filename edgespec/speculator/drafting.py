"""A generation's drafter and policy other than `auto`'s, and what wraps a drafter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edgespec.engine.constraint import Constrained, Constraint
from edgespec.engine.drafters import Drafter, HybridDrafter, ModelDrafter, NgramDrafter, NoDrafter
from edgespec.engine.generate import DraftLength, FixedK
from edgespec.engine.prediction import PredictionDrafter, WithPrediction
from edgespec.errors import ConfigError
from edgespec.options import DEFAULT_K, K_MAX, AutoSwitches, DrafterKind, DrafterSpec
from edgespec.speculator.prompts import prediction_tokens

if TYPE_CHECKING:
    from edgespec.text.grammar import Grammar


def fixed_drafter(kind: DrafterKind, model: ModelDrafter | None) -> Drafter:
    """A drafter other than `auto`, `model` the pair's draft model's (None: not loaded)."""
    if kind is DrafterKind.NONE:
        return NoDrafter()
    if kind is DrafterKind.NGRAM:
        return NgramDrafter()
    if model is None:
        raise ConfigError(f"drafter '{kind}' needs a draft model; give --draft or a --pair")
    if kind is DrafterKind.MODEL:
        return model
    return HybridDrafter(NgramDrafter(), model)


def fixed_k(drafter: Drafter, k: int | DraftLength | None) -> DraftLength:
    """The policy asked for, or the same K every round (None: the drafter's default)."""
    if not isinstance(k, int | None):
        return k
    return FixedK(DEFAULT_K.get(drafter.name, K_MAX) if k is None else k)


def prediction_drafter(
    prediction: str | Sequence[int] | None, target: Any
) -> PredictionDrafter | None:
    """The prediction's lookups, indexed (None: no prediction, or an empty one)."""
    if prediction is None:
        return None
    tokens = prediction_tokens(target, prediction)
    return PredictionDrafter(tokens) if tokens else None


def predicted(drafter: Drafter, lookup: PredictionDrafter | None) -> Drafter:
    """The drafter with the prediction's lookups on offer too; plain decoding stays plain: it
    is the baseline a prediction is measured against."""
    if lookup is None or isinstance(drafter, NoDrafter):
        return drafter
    return WithPrediction(lookup, drafter)


def constrained(
    grammar: Grammar | Constraint | None,
    asked: DrafterSpec | Drafter,
    chosen: Drafter,
    target: Any,
) -> Constrained | None:
    """The grammar, compiled where it is not yet; plain decoding asks the target for every
    token, the ones the grammar alone allows too."""
    if grammar is None:
        return None
    switches = asked.switches if isinstance(asked, DrafterSpec) else AutoSwitches()
    takes = switches.grammar and not isinstance(chosen, NoDrafter)
    from edgespec.text.grammar import Grammar  # loaded already: a grammar was made

    if isinstance(grammar, Grammar):
        grammar = grammar.compile(target.grammar_tokenizer)
    return Constrained(grammar, takes)
