"""What both scripts here share: the default pair loaded as the comparison loads it, and a switch
for the edits a copy makes again (`Edits` in edgespec/auto/suffix.py)."""

from collections.abc import Sequence

import edgespec.auto.suffix as sx
from edgespec.api import Speculator
from edgespec.models import files
from edgespec.models.registry import load_registry

ref = load_registry().default_pair
pair = (files.fetch(ref.target).path, files.fetch(ref.draft).path)
spec = Speculator.load(
    target=str(pair[0]), draft=str(pair[1]), drafter="auto", keep_draft=True, n_ctx=4096,
    n_threads=2,
)  # fmt: skip
_apply, _track = sx.Edits.apply, sx.Edits.track


def _copy_unchanged(self: sx.Edits, copy: Sequence[int], k: int) -> list[int]:
    return list(copy[:k])


def _learn_nothing(*args: object) -> None:
    return None


def edits(on: bool) -> None:
    """Turn the edits a copy makes again on or off (for the whole process)."""
    if on:
        sx.Edits.apply, sx.Edits.track = _apply, _track
    else:
        sx.Edits.apply, sx.Edits.track = _copy_unchanged, _learn_nothing  # type: ignore[method-assign]


def prompt_tokens(text: str) -> list[int]:
    """A user message in the target's chat template."""
    chat = spec.target.render_chat([{"role": "user", "content": text}])
    return spec.target.tokenize(chat, add_special=True, parse_special=True)
