"""The two streams: model text on stdout, everything else on stderr."""

from __future__ import annotations

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
