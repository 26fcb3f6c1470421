"""The terminal chat: `edgespec run` with no prompt, in a terminal."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from edgespec.api import Conversation, DoneEvent, DrafterKind
from edgespec.cli.console import err
from edgespec.cli.render import TextRenderer, stats_line
from edgespec.errors import EdgespecError
from edgespec.system import settings
from edgespec.text.grammar import Grammar, unfinished

if TYPE_CHECKING:
    from edgespec.api import Speculator

HELP = """commands:
  /help              this help
  /reset             forget the conversation
  /system TEXT       set the system prompt (and start over)
  /stats [on|off]    show or hide the statistics line after each answer
  /k N|auto          draft length for fixed drafters, or let auto choose
  /drafter NAME      auto, model, ngram, hybrid or none; auto:hints=0 (trees, resume,
                     edits, model, ramp, proof) switches one of auto's features off
  /schema FILE|JSON  answers are JSON valid against this JSON schema (a file, or the schema);
                     /schema off: free text again; /schema alone: what is set
  /json              answers are a JSON object (any); /json off: free text again
  /save FILE         save the conversation (.json, else Markdown); asks before replacing
  /save! FILE        save, replacing an existing file
  /exit              leave (also Ctrl-D, or Ctrl-C at the prompt)
  a line with \"\"\" starts and ends a multi-line message; Ctrl-C stops an answer"""

PROMPT = "› "


class ChatRepl:
    def __init__(
        self,
        spec: Speculator,
        conversation: Conversation,
        show_draft: bool,
        stats: bool,
        label: str,
        *,
        raw_control: bool = False,
    ) -> None:
        self.spec = spec
        self.raw_control = raw_control
        self.conv = conversation
        self.show_draft = show_draft
        self.stats = stats
        self.label = label

    def _note(self, text: str, style: str = "dim") -> None:
        err.print(text, style=style, markup=False)

    def _read(self) -> str | None:
        """One message (None: leave). A line with three double quotes opens a block."""
        line = input(PROMPT)
        if line.strip() != '"""':
            return line
        lines: list[str] = []
        while True:
            more = input("… ")
            if more.strip() == '"""':
                return "\n".join(lines)
            lines.append(more)

    def run(self) -> int:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (arrow keys and history for input())
        self._note(self.label)
        while True:
            try:
                text = self._read()
            except (EOFError, KeyboardInterrupt):
                sys.stdout.write("\n")
                return 0
            except UnicodeDecodeError:
                self._note("error: that was not valid UTF-8 text; type it again", "red")
                continue
            if text is None or not text.strip():
                continue
            # Nothing typed or answered ends the chat: an error is one line, and the
            # conversation goes on (only Ctrl-D, /exit or Ctrl-C at the prompt leave).
            try:
                if text.startswith("/"):
                    if self._command(text.strip()):
                        return 0
                    continue
                self._answer(text)
            except Exception as exc:
                if settings.debug():
                    raise
                detail = str(exc) if isinstance(exc, EdgespecError) else repr(exc)
                sys.stdout.write("\n")
                self._note(f"error: {detail}", "red")

    def _answer(self, text: str) -> None:
        try:
            tokens, dropped = self.conv.prepare(text)
        except EdgespecError as exc:
            self._note(f"error: {exc}", "red")
            return
        if dropped:
            self._note(
                f"(the conversation is near the context size: dropped the oldest "
                f"{dropped} exchange{'s' * (dropped > 1)})",
                "yellow",
            )
        render = TextRenderer(sys.stdout, self.show_draft, self.raw_control)
        done: DoneEvent | None = None
        events = self.conv.answer(text, tokens)
        try:
            for event in events:
                render(event)
                if isinstance(event, DoneEvent):
                    done = event
        except KeyboardInterrupt:
            events.close()
            sys.stdout.write("\n")
            self._note("(answer interrupted)")
            return
        sys.stdout.write("\n")
        sys.stdout.flush()
        if self.stats and done is not None:
            self._note(stats_line(done.stats, done.finish_reason, f"drafter {self.conv.drafter}"))
        failure = done and unfinished(done.incomplete, done.finish_reason, self.conv.max_tokens)
        if failure:
            self._note(f"error: {failure}", "red")

    def _schema(self, name: str, arg: str) -> None:
        """/schema and /json: what the next answers must match; then what is set."""
        if arg == "off":
            self.conv.grammar = None
        elif name == "/json":
            if arg:
                self._note("usage: /json (any JSON object), /json off", "red")
                return
            self.conv.grammar = Grammar.json_object()
        elif arg:
            try:
                self.conv.grammar = Grammar.from_schema_option(arg, option="/schema")
            except EdgespecError as exc:
                self._note(f"error: {exc}", "red")
                return
        grammar = self.conv.grammar
        if grammar is None:
            self._note("(no schema: answers are free text)")
        else:
            self._note(f"(answers follow {grammar.label}; /schema off for free text)")

    def _save(self, arg: str, *, overwrite: bool) -> None:
        if not arg:
            self._note("usage: /save FILE (/save! FILE replaces an existing file)", "red")
            return
        path = Path(arg).expanduser()
        try:
            self.conv.save(path, overwrite=overwrite)
        except FileExistsError:
            try:
                answer = input(f"{arg} exists: replace it? [y/N] ")
            except (EOFError, KeyboardInterrupt):  # a no, not the end of the conversation
                sys.stdout.write("\n")
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                self._note("(not saved)")
                return
            self.conv.save(path, overwrite=True)
        except EdgespecError as exc:
            self._note(f"error: {exc}", "red")
            return
        self._note(f"(saved to {arg})")

    def _command(self, line: str) -> bool:
        """Run a slash command; True means leave."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit"):
            return True
        if name == "/help":
            self._note(HELP)
        elif name == "/reset":
            self.conv.reset()
            self._note("(conversation cleared)")
        elif name == "/system":
            self.conv.system = arg or None
            self.conv.reset()
            self._note(f"(system prompt {'set' if arg else 'removed'}; conversation cleared)")
        elif name == "/stats":
            if arg not in ("", "on", "off"):
                self._note("usage: /stats [on|off]", "red")
            else:
                self.stats = {"on": True, "off": False, "": not self.stats}[arg]
                self._note(f"(statistics {'on' if self.stats else 'off'})")
        elif name == "/k":
            if arg == "auto":
                self.conv.drafter, self.conv.k = DrafterKind.AUTO, None
                self._note("(drafter auto: K chosen every round)")
            elif arg.isascii() and arg.isdigit():
                self.conv.k = int(arg)
                self._note(f"(K = {arg} for fixed drafters)")
            else:
                self._note("usage: /k N (a whole number >= 0) or /k auto", "red")
        elif name == "/drafter":
            try:
                self.spec.drafter(arg)  # an unknown name, or one that needs a model not loaded
            except EdgespecError as exc:
                self._note(f"error: {exc}", "red")
            else:
                self.conv.drafter = arg
                self._note(f"(drafter {arg})")
        elif name in ("/schema", "/json"):
            self._schema(name, arg)
        elif name in ("/save", "/save!"):
            self._save(arg, overwrite=name == "/save!")
        else:
            self._note(f"unknown command {name}; /help lists them", "red")
        return False
