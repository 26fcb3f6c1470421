"""The two streams: model text on stdout, everything else on stderr."""

from __future__ import annotations

from rich.console import Console

# Rich renders diagnostics only; model text is written to sys.stdout directly, never through
# Rich's markup parser.
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False)


def gb(size: int | None) -> str:
    """A byte count as people read memory and file sizes; "-" when unknown."""
    return "-" if size is None else f"{size / 1e9:.2f} GB"
