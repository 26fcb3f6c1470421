"""Rendering engine events: text (optionally coloured by origin) or JSON lines on stdout,
statistics on stderr."""

from __future__ import annotations

import json
from typing import TextIO

from rich.style import Style

from edgespec.api import GRAMMAR, Event, GenerationStats, RoundEvent, TokenEvent

_DRAFT_STYLE = Style(color="green")


class TextRenderer:
    def __init__(self, stream: TextIO, show_draft: bool) -> None:
        self.stream = stream
        # Colour only for a terminal; a file or pipe gets the plain text.
        self.show_draft = show_draft and stream.isatty()
        self.ended_with_newline = True

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenEvent) and event.text:
            text = (
                _DRAFT_STYLE.render(event.text)
                if self.show_draft and event.from_draft
                else event.text
            )
            self.stream.write(text)
            self.stream.flush()
            self.ended_with_newline = event.text.endswith("\n")

    def close(self) -> None:
        if not self.ended_with_newline and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


class JsonRenderer:
    """One JSON object per event; the last one holds the statistics."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenEvent):
            doc: dict[str, object] = {
                "type": "token",
                "token": event.token,
                "text": event.text,
                "from_draft": event.from_draft,
            }
        elif isinstance(event, RoundEvent):
            doc = {"type": "round", **vars(event)}
        else:
            doc = {
                "type": "done",
                "finish_reason": event.finish_reason,
                "stats": event.stats.as_dict(),
            }
        self.stream.write(json.dumps(doc, ensure_ascii=False) + "\n")
        self.stream.flush()

    def close(self) -> None:
        pass


def stats_line(stats: GenerationStats, finish_reason: str | None, drafter: str) -> str:
    parts = [
        f"{stats.generated} tokens in {stats.decode_s:.2f} s ({stats.tokens_per_s:.1f} tok/s)",
        drafter,
    ]
    if stats.drafted:
        parts.append(
            f"acceptance {stats.acceptance_rate:.0%} ({stats.accepted}/{stats.drafted}), "
            f"{stats.mean_accepted_length:.2f} tokens per target pass"
        )
        parts.append(f"drafting {stats.draft_share:.0%} of the time")
    if len(stats.by_drafter) > 1 or "none" not in stats.by_drafter:
        used = ", ".join(f"{name} {c.rounds}" for name, c in sorted(stats.by_drafter.items()))
        parts.append(f"rounds by drafter: {used}")
    forced = stats.by_drafter.get(GRAMMAR)
    if forced is not None:
        parts.append(f"{forced.accepted} of {stats.generated} tokens drafted by the grammar")
    parts.append(
        f"prompt {stats.prompt_tokens} tokens ({stats.prompt_cached} cached) "
        f"in {stats.prompt_s:.2f} s, "
        f"first token after {stats.ttft_s:.2f} s"
    )
    if finish_reason:
        parts.append(f"finish: {finish_reason}")
    return " · ".join(parts)
