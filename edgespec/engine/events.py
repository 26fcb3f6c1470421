"""What the engine yields: typed events that the CLI renders as text, colour or JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgespec.engine.drafters import PREDICTION
from edgespec.engine.tree import TreeOutcome


@dataclass(frozen=True, kw_only=True)
class TokenEvent:
    """One accepted token; `text`: what may be shown now (held back: a possible stop string, a
    split UTF-8 character). With logprobs asked for, the target's and its likeliest tokens'."""

    token: int
    text: str
    from_draft: bool
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, kw_only=True)
class RoundEvent:
    """One draft-verify round (built by name: many fields, several of one type). `drafter`: a
    `DrafterKind` or a lookup's source; `forced`: tokens the grammar alone allowed, unverified
    (not in `drafted`, `accepted`); `drafting_s`, `sample_s`, `grammar_s`: parts of the times;
    `pass_tokens`: its pass's tokens, every sequence's where lanes share it; `pass_s`: from
    asking for the pass to its rows (shared: the other lanes' work before it too)."""

    drafter: str
    k: int
    drafted: int
    accepted: int
    draft_s: float = 0.0  # 0: not measured (a round built by hand)
    verify_s: float = 0.0
    tree: TreeOutcome | None = None  # a tree round: drafted and accepted count all its nodes
    target_token: int | None = None  # the target's own token, after the accepted drafts
    confidence: tuple[float, ...] = ()  # a draft model's, of each drafted token
    forced: int = 0
    drafting_s: float = 0.0
    sample_s: float = 0.0
    grammar_s: float = 0.0
    pass_tokens: int = 0
    pass_s: float = 0.0


@dataclass
class DrafterCounts:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    prompt_cached: int = 0  # prompt tokens found in the KV cache from an earlier generation
    generated: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    prompt_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    ttft_s: float = 0.0
    by_drafter: dict[str, DrafterCounts] = field(default_factory=dict)
    # RoundEvent's parts, with the work after each round; streaming: the consumer's time too.
    drafting_s: float = 0.0
    sample_s: float = 0.0
    grammar_s: float = 0.0
    stream_s: float = 0.0
    # The rounds' K chosen, their passes' tokens and time (RoundEvent's), summed; its lane.
    k_chosen: int = 0
    pass_tokens: int = 0
    pass_s: float = 0.0
    lane: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def accepted_prediction_tokens(self) -> int:
        counts = self.by_drafter.get(PREDICTION)
        return counts.accepted if counts is not None else 0

    @property
    def rejected_prediction_tokens(self) -> int:
        """Predicted tokens drafted and rejected (OpenAI bills them as completion tokens)."""
        counts = self.by_drafter.get(PREDICTION)
        return counts.drafted - counts.accepted if counts is not None else 0

    @property
    def decode_s(self) -> float:
        return self.total_s - self.prompt_s

    @property
    def tokens_per_s(self) -> float:
        """Prompt processing excluded."""
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def mean_k(self) -> float:
        return self.k_chosen / self.rounds if self.rounds else 0.0

    @property
    def mean_pass_tokens(self) -> float:
        return self.pass_tokens / self.rounds if self.rounds else 0.0

    @property
    def wait_per_pass_s(self) -> float:
        return self.pass_s / self.rounds if self.rounds else 0.0

    @property
    def draft_share(self) -> float:
        busy = self.draft_s + self.verify_s
        return self.draft_s / busy if busy else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "prompt_cached": self.prompt_cached,
            "generated_tokens": self.generated,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_length": round(self.mean_accepted_length, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "prompt_s": round(self.prompt_s, 4),
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "total_s": round(self.total_s, 4),
            "ttft_s": round(self.ttft_s, 4),
            "draft_share": round(self.draft_share, 4),
            "mean_k": round(self.mean_k, 3),
            "mean_pass_tokens": round(self.mean_pass_tokens, 3),
            "wait_per_pass_s": round(self.wait_per_pass_s, 5),
            "accepted_prediction_tokens": self.accepted_prediction_tokens,
            "rejected_prediction_tokens": self.rejected_prediction_tokens,
            "by_drafter": {k: vars(v) for k, v in self.by_drafter.items()},
        }


@dataclass(frozen=True, kw_only=True)
class DoneEvent:
    finish_reason: str  # "stop" (end of generation or stop string), "length", "context"
    stats: GenerationStats
    incomplete: str | None = None  # why the text is not a whole sentence of its grammar


Event = TokenEvent | RoundEvent | DoneEvent
