"""Fill-in-the-middle: the prompt built from the model's own FIM tokens, laid out as llama.cpp's
server lays it out (its `format_prompt_infill`, tools/server/server-common.cpp in the llama.cpp
that llama-cpp-python 0.3.36 vendors), and where an editor wants the middle to end.

The layout, FIM's repo-level pattern (arXiv 2409.12186):

    [FIM_REP]myproject\\n [FIM_SEP]name0\\n text0 ... [FIM_SEP]filename\\n
    [FIM_PRE]prefix middle [FIM_SUF]suffix [FIM_MID]

The prompt's tokens are what the lookup drafters index, so the suffix and the extra files are
drafted from like any other prompt text.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

from edgespec.engine.events import DoneEvent, Event, GenerationStats, TokenEvent
from edgespec.errors import ConfigError

# The FIM tokens llama.cpp knows a vocabulary by (llama_vocab_fim_*): from the GGUF's
# tokenizer.ggml.fim_*_token_id keys, else found by their usual texts (<|fim_prefix|>...).
FIM_NAMES = ("pre", "suf", "mid", "pad", "rep", "sep")
# llama.cpp's server fits prefix, middle and suffix in one batch (its n_batch, 2048 by default),
# three quarters for the prefix; the extra files fill the context left after it and twice the
# tokens to generate.
FIM_WINDOW = 2048
REPO_NAME = "myproject\n"  # what llama.cpp names the repository (it has no input for it)
FILE_NAME = "filename\n"  # and the file being edited


@dataclass(frozen=True)
class Chunk:
    """An extra file (or part of one) the editor sends as context: llama.cpp's `input_extra`."""

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
    """The prompt's tokens, whether the prefix, suffix or extra files were cut to fit, and the
    text around the gap that says where the middle ends (`InfillEnd`)."""

    tokens: list[int]
    truncated: bool
    before: str  # the prefix and the middle already typed: the text the answer continues
    suffix: str


def fim_tokens(model: Any) -> FimTokens:
    """The model's FIM tokens; a ConfigError naming them when it lacks any of the three a
    prompt needs."""
    found = dict(getattr(model, "fim_tokens", None) or {})
    ids = {n: found.get(n, -1) for n in FIM_NAMES}
    missing = [n for n in ("pre", "suf", "mid") if ids[n] < 0]
    if missing:
        raise ConfigError(
            "this model has no fill-in-the-middle tokens (missing: "
            + ", ".join(f"fim_{n}" for n in missing)
            + "); use a code model trained for it, such as the default Qwen2.5-Coder pair"
        )
    optional = {n: (ids[n] if ids[n] >= 0 else None) for n in ("rep", "sep")}
    return FimTokens(ids["pre"], ids["suf"], ids["mid"], **optional)


def build_prompt(
    model: Any,
    prefix: str,
    suffix: str,
    *,
    extra: Sequence[Chunk] = (),
    middle: str = "",
    max_tokens: int,
) -> InfillPrompt:
    """llama.cpp's layout and budgets: the prefix keeps its end (cut from the left), the suffix
    its start (cut from the right), the extra files their end; text is never read as special
    tokens, so a file that contains "<|fim_suffix|>" cannot break the layout."""
    fim = fim_tokens(model)
    n_ctx = int(model.n_ctx)
    pre, suf, mid = _text(model, prefix), _text(model, suffix), _text(model, middle)
    # llama.cpp's window is its n_batch, half of its 4096-token default context: here at most
    # half of what the answer leaves, so that a smaller context still has room for other files.
    window = min(FIM_WINDOW, max(4, (n_ctx - max_tokens) // 2))
    take_pre = min(len(pre), 3 * (window // 4))
    take_suf = min(len(suf), max(0, window // 4 - (2 + len(mid))))
    extra_tokens = _extra_tokens(model, fim, extra)
    take_extra = min(len(extra_tokens), max(0, n_ctx - window - 2 * max_tokens))
    # The vocabulary's BOS, when it adds one (Qwen's does not): what an empty text becomes.
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
    # The repository's and the file's names alone are no text of the caller's to lose.
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
    """The suffix's first non-blank line, which an answer that has filled the gap goes on to
    repeat. The rest of the cursor's own line is not one (a `)` or `:` would end answers
    anywhere) unless the cursor stands at the start of its line."""
    lines = suffix.split("\n")
    at_line_start = before == "" or before.endswith("\n")
    candidates = lines if at_line_start else lines[1:]
    return next((line for line in candidates if line.strip()), None)


class InfillEnd:
    """Where the middle ends, read from the text as it streams: where it starts to repeat the
    suffix's first non-blank line (a whole line, as the suffix writes it); after `budget_s`
    of generation, at the first token with a newline (llama.cpp's `t_max_predict_ms`); at a
    line indented less than `n_indent` (llama.cpp's `n_indent`).

    `feed` returns the text safe to show and whether the answer ends here; text that may be the
    start of the repeated line is held back until it is known not to be."""

    def __init__(
        self, prompt: InfillPrompt, *, budget_s: float | None = None, n_indent: int = 0
    ) -> None:
        self.echo = echo_line(prompt.before, prompt.suffix)
        self.budget_s = budget_s
        self.n_indent = n_indent
        # A suffix that starts with a newline (the cursor at a line's end) has the repeated
        # line after it: the newline before a held line is held with it.
        self._hold_newline = prompt.suffix.startswith("\n") and self.echo is not None
        self._newline = ""  # the held newline
        self._line = ""  # the text of the line being written
        # Whether that line is held back: it started at the start of a line and is, so far,
        # the start of the repeated line.
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
        """Whether text is held back."""
        return self._holding and bool(self._newline or self._line)

    def flush(self) -> str:
        """The text held back, at the end of the answer: nothing if it is the repeated line."""
        if self._holding and self._line and self._line == self.echo:
            self._end("echo")
            return ""
        held = self._held()
        self._holding = False
        return held

    def _held(self) -> str:
        """The held newline and line, released (the line keeps streaming as it comes)."""
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
    """The engine's events, their text passed through `end`; where it ends the answer, the
    generation is closed (both caches keep only committed tokens) and a DoneEvent follows
    ("stop" for the repeated suffix, "length" for llama.cpp's limits, time and indentation).

    A token whose text is held back waits (its event with it) until the next token or the end,
    which gives it whatever of the held text is not the repeated line."""
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
