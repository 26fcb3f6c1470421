"""What `auto` may draft with and why: `DrafterChoice` and its reasons in words."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from edgespec.auto.config import AUTO
from edgespec.options import K_MAX


class ModelWhy(str, Enum):
    """Why `auto` drafts, or does not draft, with the draft model."""

    NO_DRAFT = "no draft model given"
    TARGET_ONLY = "only the target fits in memory"
    NOT_MEASURED = "the draft model was not measured"
    PAYS = "pays"  # some K beats plain decoding by `model_margin` at `model_alpha`
    DOES_NOT_PAY = "does not pay"


@dataclass(frozen=True, kw_only=True)
class TreeShowcase:
    """`auto`'s draft for a lookup whose text went several ways (at `alpha`): `nodes` tokens,
    `width` leaves (1: a chain, trees do not pay), its speed and the best chain's."""

    width: int
    nodes: int
    speed: float
    chain_speed: float
    tau_max: float  # what verifying K_MAX tokens costs, in target steps
    alpha: float


@dataclass(frozen=True, kw_only=True)
class LeavesShowcase:
    """The draft model's second choices verified beside its chain: how many (0: none pay), the
    speed, and the chain's alone."""

    leaves: int
    speed: float
    chain_speed: float


@dataclass(frozen=True, kw_only=True)
class DrafterChoice:
    """What `auto` may draft with, why, and the numbers behind it; `reason` renders them."""

    use_model: bool
    model_k: int
    model_speed: float
    ngram_k: int
    ngram_speed: float
    why: ModelWhy
    measured: bool  # False: the costs are guessed from the files' sizes
    tree: TreeShowcase
    c: float | None = None  # a draft step, in target steps (when the model was weighed)
    tau2: float | None = None  # verifying 2 tokens against one (when the model was weighed)
    leaves: LeavesShowcase | None = None  # when the model is used
    model_alpha: float = AUTO.plan.model_alpha  # the acceptance the model was weighed at
    lookup_alpha: float = AUTO.plan.lookup_showcase_alpha  # and lookups

    @property
    def model_reason(self) -> str:
        """Whether the draft model is used, and why, in words (the plan's draft_reason)."""
        if self.why not in (ModelWhy.PAYS, ModelWhy.DOES_NOT_PAY):
            return self.why.value
        costs = (
            f"a draft step costs c={self.c:.2f} target steps and verifying 2 tokens "
            f"{self.tau2:.2f}x one: "
        )
        if self.why is ModelWhy.DOES_NOT_PAY:
            return costs + (
                f"even at a={self.model_alpha} the draft model cannot beat plain decoding (best "
                f"{self.model_speed:.2f}x), so it is not loaded"
            )
        return costs + (
            f"at a={self.model_alpha} the draft model reaches {self.model_speed:.2f}x with "
            f"K={self.model_k}, so it is used, K re-chosen every round"
        )

    @property
    def ngram_reason(self) -> str:
        note = (
            f"n-gram lookup (free drafts) speculates when the text repeats what came before: at "
            f"a={self.lookup_alpha} the best K is {self.ngram_k} (expected "
            f"{self.ngram_speed:.2f}x); " + _tree_note(self.tree)
        )
        if not self.measured:
            note += "; these costs are guessed from the files' sizes until this device is measured"
        return note

    @property
    def reason(self) -> str:
        """The whole sentence: the draft model, its second choices, n-gram lookup."""
        leaves = [_leaves_note(self.leaves)] if self.leaves is not None else []
        return "; ".join([self.model_reason, *leaves, self.ngram_reason])


def _tree_note(tree: TreeShowcase) -> str:
    """Whether tree drafts pay on this device (where verifying is cheap), in words."""
    if tree.width == 1:
        return (
            "tree drafts (other continuations verified in the same pass) do not pay here: "
            f"verifying more tokens costs too much (tau({K_MAX}) = {tree.tau_max:.1f})"
            ", so auto keeps to chains"
        )
    return (
        f"tree drafts pay here: where the text went several ways before (a={tree.alpha}"
        f"), a tree of {tree.nodes} tokens ({tree.width} leaves) is expected at {tree.speed:.2f}x "
        f"against {tree.chain_speed:.2f}x for the best chain"
    )


def _leaves_note(leaves: LeavesShowcase) -> str:
    """Whether the draft model's second choices, verified beside its chain, pay here."""
    if leaves.leaves == 0:
        return "its second choices (tree leaves beside the chain) do not pay here"
    return (
        f"its second choices are verified beside the chain where it is unsure ({leaves.leaves} "
        f"leaves, expected {100 * (leaves.speed / leaves.chain_speed - 1):.1f} % faster than "
        "the chain alone)"
    )
