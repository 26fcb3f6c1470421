"""What the engine yields: typed events that the CLI renders as text, colour or JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgespec.engine.drafters import PREDICTION
from edgespec.engine.tree import TreeOutcome


@dataclass(frozen=True, kw_only=True)
class TokenEvent:
    """One accepted token. `text` is what may be shown now: it can be empty while a possible
    stop string or a split UTF-8 character is held back, and hold earlier tokens' text.

    With logprobs asked for (GenerationConfig.logprobs): the target's log-probability of this
    token and its likeliest tokens at this position, `(token, logprob)` likeliest first, from
    the row of logits that verified it (engine/logprobs.py); None and () when not asked for."""

    token: int
    text: str
    from_draft: bool
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, kw_only=True)
class RoundEvent:
    """One draft-verify round (built by name: ten fields, several of the same type)."""

    # Which drafter made this round's draft: a `DrafterKind` (`none` for a plain step), or the
    # source a lookup names inside one (`auto`'s `suffix`, a grammar's `grammar`), so a str.
    drafter: str
    k: int  # draft length asked for
    drafted: int
    accepted: int
    draft_s: float = 0.0  # seconds drafting (0: not measured, as in a round built by hand)
    verify_s: float = 0.0  # seconds verifying
    tree: TreeOutcome | None = None  # a tree round: drafted and accepted count all its nodes
    target_token: int | None = None  # the target's own token, after the accepted drafts
    # A draft model's probability of each token it drafted (a tree's: of its main chain).
    confidence: tuple[float, ...] = ()
    # Tokens a grammar alone allowed, taken before the draft without verification (certain);
    # `drafted` and `accepted` count the drafter's tokens only.
    forced: int = 0
    # Parts of draft_s and verify_s, in seconds: drafting without the grammar (the draft
    # model's decodes still in it), verification after the target's decode (acceptance tests,
    # the target's token; 0 under a grammar) and the grammar's work (its forced tokens, the
    # draft cut to it, verification under it).
    drafting_s: float = 0.0
    sample_s: float = 0.0
    grammar_s: float = 0.0


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
    # Seconds by part (RoundEvent's): drafting also holds the drafters' and the policy's work
    # after each round; streaming is the tokens' emission (stop strings, UTF-8) and the
    # consumer's time with each TokenEvent.
    drafting_s: float = 0.0
    sample_s: float = 0.0
    grammar_s: float = 0.0
    stream_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / drafted tokens."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target pass: 1 + accepted / rounds."""
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def accepted_prediction_tokens(self) -> int:
        """Tokens drafted from the predicted output and accepted by verification."""
        counts = self.by_drafter.get(PREDICTION)
        return counts.accepted if counts is not None else 0

    @property
    def rejected_prediction_tokens(self) -> int:
        """Tokens drafted from the predicted output and rejected by verification (what the
        prediction cost: OpenAI bills these as completion tokens). Prediction tokens never
        drafted (an answer that went elsewhere) are not counted."""
        counts = self.by_drafter.get(PREDICTION)
        return counts.drafted - counts.accepted if counts is not None else 0

    @property
    def decode_s(self) -> float:
        return self.total_s - self.prompt_s

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of generation (prompt processing excluded)."""
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0

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
            "accepted_prediction_tokens": self.accepted_prediction_tokens,
            "rejected_prediction_tokens": self.rejected_prediction_tokens,
            "by_drafter": {k: vars(v) for k, v in self.by_drafter.items()},
        }


@dataclass(frozen=True, kw_only=True)
class DoneEvent:
    finish_reason: str  # "stop" (end of generation or stop string), "length", "context"
    stats: GenerationStats
    # With a grammar: why the text is not a whole sentence of it (None: it is, or no grammar).
    incomplete: str | None = None


Event = TokenEvent | RoundEvent | DoneEvent
