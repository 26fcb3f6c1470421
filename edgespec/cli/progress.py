"""Download progress on stderr, one bar per file."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class DownloadBars:
    """Implements edgespec.models.files.Progress with rich; use as a context manager."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: int | None = None
        self._started = False

    def start(self, label: str, total: int | None) -> None:
        if not self._started:
            self._progress.start()
            self._started = True
        self._task = self._progress.add_task(label, total=total)

    def advance(self, nbytes: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, nbytes)  # type: ignore[arg-type]

    def note(self, message: str) -> None:
        self.console.print(message, style="dim", markup=False, highlight=False)

    def __enter__(self) -> DownloadBars:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started:
            self._progress.stop()
