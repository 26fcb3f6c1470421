"""Fill-in-the-middle: the prompt in FIM's repo-level pattern (arXiv 2409.12186) as llama.cpp's
server lays it out (`format_prompt_infill`), and where an editor wants the middle to end. The
lookup drafters index the prompt, so the suffix and the extra files are drafted from too."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

from edgespec.engine.events import DoneEvent, Event, GenerationStats, TokenEvent
from edgespec.errors import ConfigError

# llama.cpp fits prefix, middle and suffix in one batch (its n_batch's default), three quarters
# for the prefix; extra files fill what is left after it and twice the tokens to generate.
FIM_WINDOW = 2048
REPO_NAME = "myproject\n"  # llama.cpp's names for the repository and the edited file
FILE_NAME = "filename\n"


@dataclass(frozen=True)
class Chunk:
    """An extra file (or part of one) sent as context: llama.cpp's `input_extra`."""

    text: str
    filename: str = "tmp"


@dataclass(frozen=True)
class FimTokens:
    pre: int
    suf: int
    mid: int
    rep: int | None = None
    sep: int | None = None


@dataclass(frozen=True)
class InfillPrompt:
    """The prompt's tokens, whether any text was cut to fit, and the text around the gap."""

    tokens: list[int]
    truncated: bool
    before: str  # the prefix and the middle already typed
    suffix: str


def fim_tokens(model: Any) -> FimTokens:
    """The model's FIM tokens; a ConfigError where it lacks one of the three a prompt needs."""
    declared = getattr(model, "fim_tokens", None) or {}  # llama.cpp's: -1 for one it lacks
    ids = {name: token for name, token in declared.items() if token >= 0}
    missing = [n for n in ("pre", "suf", "mid") if n not in ids]
    if missing:
        raise ConfigError(
            "this model has no fill-in-the-middle tokens (missing: "
            + ", ".join(f"fim_{n}" for n in missing)
            + "); use a code model trained for it, such as the default Qwen2.5-Coder pair"
        )
    return FimTokens(ids["pre"], ids["suf"], ids["mid"], ids.get("rep"), ids.get("sep"))


def build_prompt(
    model: Any,
    prefix: str,
    suffix: str,
    *,
    extra: Sequence[Chunk] = (),
    middle: str = "",
    max_tokens: int,
) -> InfillPrompt:
    """llama.cpp's layout and budgets: the prefix keeps its end, the suffix its start, the
    extra files their end. Text is never read as special tokens, so a file holding
    "<|fim_suffix|>" cannot break the layout."""
    fim = fim_tokens(model)
    n_ctx = int(model.n_ctx)
    pre, suf, mid = _text(model, prefix), _text(model, suffix), _text(model, middle)
    # At most half of what the answer leaves (llama.cpp's is half its default context), so a
    # smaller context keeps room for other files.
    window = min(FIM_WINDOW, max(4, (n_ctx - max_tokens) // 2))
    take_pre = min(len(pre), 3 * (window // 4))
    take_suf = min(len(suf), max(0, window // 4 - (2 + len(mid))))
    extra_tokens = _extra_tokens(model, fim, extra)
    take_extra = min(len(extra_tokens), max(0, n_ctx - window - 2 * max_tokens))
    # The vocabulary's BOS, where it adds one: what an empty text becomes.
    bos = list(model.tokenize("", add_special=True, parse_special=False))
    tokens = [
        *extra_tokens[len(extra_tokens) - take_extra :],
        *bos,
        fim.pre,
        *pre[len(pre) - take_pre :],
        *mid,
        fim.suf,
        *suf[:take_suf],
        fim.mid,
    ]
    # The repository's and file's names alone are not the caller's text: no loss.
    lost_extra = bool(extra) and take_extra < len(extra_tokens)
    cut = take_pre < len(pre) or take_suf < len(suf) or lost_extra
    return InfillPrompt(tokens, cut, prefix + middle, suffix)


def _text(model: Any, text: str) -> list[int]:
    return list(model.tokenize(text, add_special=False, parse_special=False)) if text else []


def _extra_tokens(model: Any, fim: FimTokens, extra: Sequence[Chunk]) -> list[int]:
    tokens: list[int] = []
    if fim.rep is not None:
        tokens += [fim.rep, *_text(model, REPO_NAME)]
    for chunk in extra:
        if fim.sep is not None:
            tokens += [fim.sep, *_text(model, chunk.filename + "\n")]
        else:  # llama.cpp's separator for a vocabulary without one
            tokens += _text(model, "\n\n--- snippet ---\n\n")
        tokens += _text(model, chunk.text)
    if fim.sep is not None:
        tokens += [fim.sep, *_text(model, FILE_NAME)]
    return tokens


def echo_line(before: str, suffix: str) -> str | None:
    """The suffix's first non-blank line, which an answer that filled the gap goes on to
    repeat; not the rest of the cursor's line unless the cursor starts it (a `)` would end
    answers anywhere)."""
    lines = suffix.split("\n")
    at_line_start = before == "" or before.endswith("\n")
    candidates = lines if at_line_start else lines[1:]
    return next((line for line in candidates if line.strip()), None)


class InfillEnd:
    """Where the middle ends, read as the text streams: where it repeats the suffix's first
    non-blank line (a whole line); after `budget_s`, at the first newline (llama.cpp's
    `t_max_predict_ms`); at a line indented less than `n_indent` (llama.cpp's `n_indent`).
    `feed` returns the text safe to show (what may start the repeated line is held back) and
    whether the answer ends."""

    def __init__(
        self, prompt: InfillPrompt, *, budget_s: float | None = None, n_indent: int = 0
    ) -> None:
        self.echo = echo_line(prompt.before, prompt.suffix)
        self.budget_s = budget_s
        self.n_indent = n_indent
        # The cursor at a line's end: the newline before a held line is held with it.
        self._hold_newline = prompt.suffix.startswith("\n") and self.echo is not None
        self._newline = ""  # the held newline
        self._line = ""  # the line being written
        # Held back: it began at a line's start and so far begins the repeated line.
        at_line_start = prompt.before == "" or prompt.before.endswith("\n")
        self._holding = at_line_start and self.echo is not None
        self._lines = 0  # newlines generated
        self.reason: str | None = None  # why it ended: "echo", "time", "indent"

    def feed(self, text: str, elapsed_s: float) -> tuple[str, bool]:
        out: list[str] = []
        for ch in text:
            if ch == "\n":
                if self._holding and self._line == self.echo:
                    self._end("echo")
                    return "".join(out), True
                out.append(self._held())
                self._newline = ch if self._hold_newline else ""
                out.append("" if self._hold_newline else ch)
                self._line, self._holding = "", self.echo is not None
                self._lines += 1
                continue
            self._line += ch
            if self._indent_short():
                self._line = self._line[:-1]  # the line goes, its indentation stays (llama.cpp)
                out.append(self._held())
                self._end("indent")
                return "".join(out), True
            if not self._holding:
                out.append(ch)
            elif self.echo is not None and not self.echo.startswith(self._line):
                out.append(self._held())
                self._holding = False
        shown = "".join(out)
        if self.budget_s is not None and "\n" in text and elapsed_s > self.budget_s:
            return shown + self.flush(), self._end("time")
        return shown, False

    @property
    def holding(self) -> bool:
        return self._holding and bool(self._newline or self._line)

    def flush(self) -> str:
        """The text held back, at the answer's end: nothing if it is the repeated line."""
        if self._holding and self._line and self._line == self.echo:
            self._end("echo")
            return ""
        held = self._held()
        self._holding = False
        return held

    def _held(self) -> str:
        """The held newline and line, released."""
        held = self._newline + (self._line if self._holding else "")
        self._newline = ""
        return held

    def _indent_short(self) -> bool:
        """The first visible character of a line after the first, before column n_indent."""
        line = self._line
        if not self.n_indent or self._lines == 0 or line[-1] in " \t":
            return False
        return line.lstrip(" \t") == line[-1] and len(line) - 1 < self.n_indent

    def _end(self, reason: str) -> bool:
        self.reason = reason
        self._newline, self._line, self._holding = "", "", False
        return True


def until_filled(
    events: Generator[Event, None, None],
    end: InfillEnd,
    stats: Callable[[], GenerationStats | None],
    clock: Callable[[], float] = perf_counter,
) -> Generator[Event, None, None]:
    """The engine's events, their text passed through `end` (a held token waits for the next);
    where it ends the answer, the generation is closed and a DoneEvent follows: "stop" for
    the repeated suffix, "length" for time and indentation, as llama.cpp."""
    start: float | None = None
    pending: TokenEvent | None = None
    try:
        for event in events:
            if isinstance(event, DoneEvent):
                tail = end.flush()
                if pending is not None:
                    yield replace(pending, text=pending.text + tail)
                yield event
                return
            if not isinstance(event, TokenEvent):
                yield event
                continue
            if pending is not None:
                yield pending
                pending = None
            start = clock() if start is None else start
            text, stop = end.feed(event.text, clock() - start)
            event = replace(event, text=text)
            if stop:
                yield event
                events.close()  # its stats are final now
                done = stats()
                assert done is not None
                yield DoneEvent(
                    finish_reason="stop" if end.reason == "echo" else "length", stats=done
                )
                return
            if end.holding:
                pending = event
            else:
                yield event
    finally:
        events.close()
