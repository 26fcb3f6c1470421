"""The decoding options every entry point shares (CLI, Python API, bench, chat, the engine):
drafter names, the draft length K and the token budget, their defaults and their validation.
Plain values only: checks that need the network or the disk belong to the planner."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields
from enum import Enum

from edgespec.errors import ConfigError


class DrafterKind(str, Enum):
    """The drafters one may ask for (`--drafter`), named as users type them (a `str`: they
    print and serialize as those words). Not `DraftKind`, what one round's draft is made
    from."""

    AUTO = "auto"  # the policy chooses, every round, between lookups and the draft model
    MODEL = "model"
    NGRAM = "ngram"
    HYBRID = "hybrid"
    NONE = "none"

    def __str__(self) -> str:
        return self.value  # as every Python formats it (3.12 formats an Enum by its str())


DRAFTERS = tuple(DrafterKind)
NEEDS_DRAFT_MODEL = frozenset({DrafterKind.MODEL, DrafterKind.HYBRID})
K_MAX = 32
# The most leaves of a tree draft (sequences the target's cache holds during a round).
TREE_WIDTH = 4
# K for the fixed drafters when none is given. A model draft is cut short by its own
# confidence (p_min), so its K is a cap; n-gram drafts cost nothing to make, only to verify.
# For `auto` K is the most it may choose in a round.
# By drafter kind; a drafter object's name (a str) finds its kind's.
DEFAULT_K: dict[str, int] = {
    DrafterKind.AUTO: K_MAX,
    DrafterKind.MODEL: 4,
    DrafterKind.NGRAM: 8,
    DrafterKind.HYBRID: 8,
    DrafterKind.NONE: 0,
}


def check_drafter(name: str) -> DrafterKind:
    if name not in DRAFTERS:
        raise ConfigError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)}")
    return DrafterKind(name)


def check_k(k: int) -> int:
    if k < 0:
        raise ConfigError(
            f"--draft-tokens must be >= 0, got {k} (K: tokens drafted a round)", field="k"
        )
    if k > K_MAX:
        # A round verifies K + 1 positions and holds K + 1 rows of the vocabulary.
        raise ConfigError(f"--draft-tokens must be <= {K_MAX}, got {k}", field="k")
    return k


@dataclass(frozen=True, kw_only=True)
class AutoSwitches:
    """Which of `auto`'s features run: all by default, each switched off by `auto:NAME=0`. One
    object carries them from the command line to the policy and the suffix drafter."""

    hints: bool = True  # copies make the replacements the instruction names (auto/hints.py)
    trees: bool = True  # tree drafts; off: chains only (tree width 1)
    resume: bool = True  # a copy left at an edit is taken up again just past it (auto/edits.py)
    edits: bool = True  # copies make again the replacements the answer made (auto/edits.py)
    model: bool = True  # the draft model is on offer; off: lookups only
    ramp: bool = True  # long lookups wait for proof that the text is copied (auto/budget.py)
    proof: bool = True  # that proof is a copy of `copy_proof` tokens accepted in full; off: one
    budget: bool = True  # a lookup risks no more than the answer's lookups gained (auto/budget.py)
    grammar: bool = True  # with a grammar, the tokens it alone allows skip the target pass

    @property
    def label(self) -> str:
        """`:hints=0:trees=0` for the switches that are off; empty when all are on."""
        return "".join(f":{f.name}=0" for f in fields(self) if not getattr(self, f.name))


AUTO_SWITCHES = tuple(f.name for f in fields(AutoSwitches))
ALL_ON = AutoSwitches()  # the default: every feature on


@dataclass(frozen=True, kw_only=True)
class DrafterSpec:
    """A drafter as asked for: its name (checked, a `DrafterKind`) and, for `auto`, which
    features run."""

    name: DrafterKind
    switches: AutoSwitches = AutoSwitches()

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_drafter(self.name))

    @property
    def label(self) -> str:
        return self.name + self.switches.label


@dataclass(frozen=True, kw_only=True)
class Drafting:
    """How a command drafts, settled before anything is planned: the drafter, its K (fixed, or
    for `auto` the most it may choose in a round), and whether the draft model is loaded even
    where the drafter does not use it. `Drafting.of` parses a name and defaults K."""

    drafter: DrafterSpec
    k: int
    keep_draft: bool = False

    def __post_init__(self) -> None:
        parse_drafter(self.drafter)  # refuses switches on a drafter other than auto
        check_k(self.k)

    @classmethod
    def of(
        cls,
        drafter: str | DrafterSpec = DrafterKind.AUTO,
        k: int | None = None,
        *,
        keep_draft: bool = False,
    ) -> Drafting:
        """`drafter` (a name with auto's switches, `auto:hints=0`) with `k`, else its default."""
        spec = parse_drafter(drafter)
        return cls(drafter=spec, k=DEFAULT_K[spec.name] if k is None else k, keep_draft=keep_draft)

    @property
    def auto(self) -> bool:
        return self.drafter.name is DrafterKind.AUTO

    @property
    def needs_model(self) -> bool:
        return self.drafter.name in NEEDS_DRAFT_MODEL

    @property
    def wants_model(self) -> bool:
        """Whether the draft file is worth finding: a drafter may use it."""
        return self.needs_model or self.auto or self.keep_draft


def parse_drafter(drafter: str | DrafterSpec) -> DrafterSpec:
    """A drafter's name with auto's switches (`auto:hints=0:trees=0`), checked."""
    if isinstance(drafter, DrafterSpec):
        if drafter.name is not DrafterKind.AUTO and drafter.switches != AutoSwitches():
            raise ConfigError(f"drafter '{drafter.name}' has no switches; only auto has")
        return drafter
    return parse_drafter_fields(drafter)[0]


def parse_drafter_fields(
    text: str, numbers: Collection[str] = (), what: str = "drafter"
) -> tuple[DrafterSpec, dict[str, int]]:
    """`name[:key=value...]`: the drafter with auto's switches (each 0 or 1), and the whole
    numbers given for the keys in `numbers` (bench's `k` and `w`). `what` names the text in
    errors (a drafter, a bench config)."""
    given, *options = text.strip().split(":")
    try:
        name = check_drafter(given)
    except ConfigError as exc:
        if what != "drafter":
            raise ConfigError(f"unknown {what} {text!r}: {exc}") from None
        raise ConfigError(f"drafter {text!r}: {exc}" if options else str(exc)) from None
    switches: dict[str, bool] = {}
    values: dict[str, int] = {}
    for option in options:
        key, _, value = option.partition("=")
        problem = _problem(name, key, value, [*switches, *values], numbers)
        if problem:
            raise ConfigError(f"{what} {text!r}: {problem}")
        if key in numbers:
            values[key] = int(value)
        else:
            switches[key] = value == "1"
    return DrafterSpec(name=name, switches=AutoSwitches(**switches)), values


def _problem(
    name: DrafterKind, key: str, value: str, given: Collection[str], numbers: Collection[str]
) -> str | None:
    """What is wrong with the option `key=value` of drafter `name`, or None."""
    if key in given:
        return f"{key} is given twice"
    if key in numbers:
        return None if value.isdigit() else f"{key} must be a whole number, not {value!r}"
    if key in AUTO_SWITCHES and name is not DrafterKind.AUTO:
        return f"{key} is a switch of auto only, not of {name}"
    if key in AUTO_SWITCHES:
        return None if value in ("0", "1") else f"{key} must be 0 or 1, not {value!r}"
    known = [f"{n}=N" for n in numbers]
    if name is DrafterKind.AUTO:
        known += [f"{s}=0|1" for s in AUTO_SWITCHES]
    return f"unknown switch {key!r}; {name} takes {', '.join(known) or 'none'}"


def check_max_tokens(n: int) -> int:
    if n < 1:
        raise ConfigError(f"--max-tokens must be >= 1, got {n}", field="max_tokens")
    return n
