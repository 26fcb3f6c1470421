"""Replacements an instruction asks for in so many words, and copies that make them."""

from __future__ import annotations

from typing import Any

import pytest

from edgespec.api import Speculator
from edgespec.auto.hints import replacements
from edgespec.auto.prior import CostModel
from edgespec.auto.suffix import SuffixDrafter
from edgespec.engine.drafters import Drafter, EitherDrafter
from edgespec.engine.generate import DraftLength
from tests.copy_texts import FILE, A, B, C, drafts_along
from tests.fakes import FakeTextModel


def test_renames_and_changed_values_are_read_from_the_instruction() -> None:
    assert replacements("Rename the function `merge_configs` to `deep_merge` everywhere.") == [
        ("merge_configs", "deep_merge")
    ]
    assert replacements("Change the port from 8080 to 3000 in this server.") == [("8080", "3000")]
    assert replacements("Replace every `print` with `log.debug`.") == [("print", "log.debug")]
    # Several at once, in the order named; a sentence's full stop is not part of a name.
    assert replacements(
        "Rename the class `Inventory` to `Stock` and the attribute `items` to `levels`."
    ) == [("Inventory", "Stock"), ("items", "levels")]
    assert replacements(
        "Change the filter from 'paid' to 'shipped' and the limit from 50 to 20 in both queries."
    ) == [("paid", "shipped"), ("50", "20")]
    assert replacements("Rename MAX_SIZE to LIMIT.") == [("MAX_SIZE", "LIMIT")]


def test_what_no_copy_can_make_gives_nothing() -> None:
    assert replacements("Convert the cache from a list to a dict.") == []  # plain words
    assert replacements("Change RETRIES to 5 and double the delay.") == []  # a new value
    # A rename limited to one place would be wrong everywhere else.
    assert replacements("Rename the parameter `path` to `root` in `remove_tree`.") == []
    # Only the instruction counts, not the code it comes with.
    assert replacements("Add type hints.\n\n```python\n# rename `a_b` to `c_d`\n```") == []


def test_a_copy_makes_an_expected_replacement_at_its_first_occurrence() -> None:
    # The instruction said 90 91 becomes 95: the copy drafts 95 where the file has 90 91.
    drafter = SuffixDrafter(hints=[([90, 91], [95])])
    assert drafts_along(drafter, FILE, [0, *A], 4) == [95, *B[:3]]
    # Expected for every generation of this drafter; the next request's names its own.
    assert drafts_along(drafter, FILE, [0, *A], 4) == [95, *B[:3]]
    untold = SuffixDrafter(memory=drafter.memory)
    assert drafts_along(untold, FILE, [0, *A], 4) == [90, 91, *B[:2]]


def test_an_expected_replacement_the_answer_does_not_make_is_forgotten() -> None:
    drafter = SuffixDrafter(hints=[([90, 91], [95])])
    # The answer kept 90 91 at the first occurrence: the copy keeps them at the second.
    assert drafts_along(drafter, FILE, [0, *A, 90, 91, *B], 4) == [90, 91, *C[:2]]


def test_auto_is_told_what_the_instruction_asks_to_replace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = Speculator(FakeTextModel(seed=1, n_ctx=256), None)
    spec.enable_auto(CostModel({1: 1.0, 2: 1.1, 4: 1.2}, 0.0), use_model=False)
    started: list[Drafter] = []  # each generation's drafter, as stream() starts it
    strategy = spec.strategy

    def watched(*args: Any, **kwargs: Any) -> tuple[Drafter, DraftLength]:
        drafter, policy = strategy(*args, **kwargs)
        started.append(drafter)
        return drafter, policy

    monkeypatch.setattr(spec, "strategy", watched)
    tokenize = spec.target.tokenize
    expected = {
        (tuple(tokenize(" ab")), tuple(tokenize(" cd"))),
        (tuple(tokenize("ab")), tuple(tokenize("cd"))),
    }

    def learned(prompt: str, **kwargs: object) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
        next(iter(spec.stream(prompt, max_tokens=1, **kwargs)))  # type: ignore[arg-type]
        either = started[-1]
        assert isinstance(either, EitherDrafter) and isinstance(either.lookup, SuffixDrafter)
        edits = either.lookup.edits.by_first.values()
        return {(old, tuple(new)) for known in edits for old, new in known.items()}

    assert learned("Rename `ab` to `cd`.") == expected
    # From a conversation's last user message; from the instruction given beside token ids.
    chat = [{"role": "user", "content": "Rename `ab` to `cd`."}]
    assert learned(chat) == expected  # type: ignore[arg-type]
    ids = spec.prompt_tokens("Rename `ab` to `cd`.")
    assert learned(ids, instruction="Rename `ab` to `cd`.") == expected  # type: ignore[arg-type]
    assert learned(ids) == set()  # type: ignore[arg-type]
    assert learned("Rename `ab` to `cd`.", instruction="Add hints.") == set()
