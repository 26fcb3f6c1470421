"""The two streams: model text on stdout, everything else on stderr."""

from __future__ import annotations

import codecs
import io
import os
import sys

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

# Rich renders diagnostics only; model text is written to sys.stdout directly, never through
# Rich's markup parser.
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False)


def gb(size: int | None) -> str:
    """A byte count as people read memory and file sizes; "-" when unknown."""
    return "-" if size is None else f"{size / 1e9:.2f} GB"


def is_tty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def say(text: str, *, markup: bool = True) -> None:
    """A line of text on stdout: word-wrapped for a terminal; whole for a pipe or a file, where
    a break at 80 columns would split one line in two for grep."""
    out.print(text, markup=markup, soft_wrap=not is_tty(sys.stdout))


def print_tables(*tables: Table) -> None:
    """Tables on stdout: drawn for a terminal; for a pipe or a file, where a drawing would cut
    names to fit 80 columns, a header line and one tab-separated line per row, whole, with a
    blank line between tables."""
    if is_tty(sys.stdout):
        for table in tables:
            out.print(table)
        return
    sys.stdout.write("\n".join(_plain(table) for table in tables))


def _plain(table: Table) -> str:
    columns = [[_cell(c.header), *map(_cell, c.cells)] for c in table.columns]
    return "".join("\t".join(row) + "\n" for row in zip(*columns, strict=True))


def _cell(cell: RenderableType) -> str:
    """A cell's text as it is: no markup parsed, no tab or line break to split the record."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return text.replace("\t", " ").replace("\n", " ")


def take_any_text(stream: object) -> None:
    """Let `stream` write any text (model text, file names, marks such as → and ✓) instead of
    raising UnicodeEncodeError at the first character its encoding lacks.

    A pipe or a file gets UTF-8 (what Python's UTF-8 mode writes, PEP 686, and JSON readers
    expect), not the locale's encoding: on Windows a strict ANSI code page (cp1252) that holds
    little of Unicode. A terminal keeps its encoding (the one it displays), and so does one
    chosen with PYTHONIOENCODING; there a character it lacks becomes "?" (stderr keeps Python's
    backslash escapes).
    """
    if not isinstance(stream, io.TextIOWrapper):
        return
    try:
        if codecs.lookup(stream.encoding).name.startswith("utf"):
            return
    except LookupError:
        return
    errors = "replace" if stream.errors == "strict" else stream.errors
    chosen = os.environ.get("PYTHONIOENCODING", "").partition(":")[0].strip()
    if is_tty(stream) or (chosen and not sys.flags.ignore_environment):
        stream.reconfigure(errors=errors)
    else:
        stream.reconfigure(encoding="utf-8", errors=errors)
