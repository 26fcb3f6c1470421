"""Rendering engine events: text (optionally coloured by origin) or JSON lines on stdout,
statistics on stderr."""

from __future__ import annotations

import json
from typing import TextIO

from rich.style import Style

from edgespec.api import GRAMMAR, PREDICTION, Event, GenerationStats, RoundEvent, TokenEvent

_DRAFT_STYLE = Style(color="green")


# Control characters in model text, shown as `cat -v` shows them (ESC as ^[, DEL as ^?, the
# C1 controls as M-^[...): on a terminal they would act, and a model that copies a file (the
# drafter makes that cheap) copies the escape sequences in it: a clipboard write (OSC 52), a
# cleared screen, a title, a line written over with a carriage return. Line feeds and tabs
# pass: they are how text is laid out.
_VISIBLE = {
    **{c: f"^{chr(c + 64)}" for c in range(32) if chr(c) not in "\n\t"},
    0x7F: "^?",
    **{c: f"M-^{chr(c - 0x80 + 64)}" for c in range(0x80, 0xA0)},
}


def visible(text: str) -> str:
    """`text` with its control characters made visible (see _VISIBLE)."""
    return text.translate(_VISIBLE)


class TextRenderer:
    def __init__(self, stream: TextIO, show_draft: bool, raw_control: bool = False) -> None:
        self.stream = stream
        # Colour only for a terminal; a file or pipe gets the plain text.
        self.show_draft = show_draft and stream.isatty()
        # A terminal gets control characters made visible (unless asked for as they are); a
        # file or pipe gets the text as the model wrote it.
        self.escape = stream.isatty() and not raw_control
        self.ended_with_newline = True

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenEvent) and event.text:
            text = visible(event.text) if self.escape else event.text
            if self.show_draft and event.from_draft:
                text = _DRAFT_STYLE.render(text)
            self.stream.write(text)
            self.stream.flush()
            self.ended_with_newline = event.text.endswith("\n")

    def close(self) -> None:
        if not self.ended_with_newline and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


# JSON escapes the C0 controls, not the C1 ones (ESC's 8-bit forms, which some terminals act
# on); escaped, they are the same JSON.
_C1_JSON = {c: f"\\u{c:04x}" for c in range(0x80, 0xA0)}


class JsonRenderer:
    """One JSON object per event; the last one holds the statistics."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.on_terminal = stream.isatty()

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenEvent):
            doc: dict[str, object] = {
                "type": "token",
                "token": event.token,
                "text": event.text,
                "from_draft": event.from_draft,
            }
            if event.logprob is not None:  # asked for (--logprobs)
                doc["logprob"] = event.logprob
                doc["top_logprobs"] = [{"token": t, "logprob": p} for t, p in event.top_logprobs]
        elif isinstance(event, RoundEvent):
            doc = {"type": "round", **vars(event)}
        else:
            doc = {
                "type": "done",
                "finish_reason": event.finish_reason,
                "stats": event.stats.as_dict(),
            }
        line = json.dumps(doc, ensure_ascii=False)
        self.stream.write((line.translate(_C1_JSON) if self.on_terminal else line) + "\n")
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
    if PREDICTION in stats.by_drafter:
        parts.append(
            f"prediction: {stats.accepted_prediction_tokens} tokens accepted, "
            f"{stats.rejected_prediction_tokens} rejected"
        )
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
