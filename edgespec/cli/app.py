"""The `edgespec` command and its error boundary."""

from __future__ import annotations

import sys

import typer

from edgespec.cli.bench_cmd import bench
from edgespec.cli.check_cmd import check
from edgespec.cli.console import take_any_text
from edgespec.cli.doctor_cmd import doctor
from edgespec.cli.infill_cmd import infill
from edgespec.cli.models_cmd import models
from edgespec.cli.plan_cmd import plan
from edgespec.cli.pull_cmd import pull
from edgespec.cli.run_cmd import run
from edgespec.cli.serve_cmd import serve
from edgespec.errors import EdgespecError
from edgespec.system import settings

app = typer.Typer(
    name="edgespec",
    help="Lossless speculative decoding on llama.cpp, tuned to the device it runs on.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(run)
app.command()(infill)
app.command()(models)
app.command()(pull)
app.command()(check)
app.command()(plan)
app.command()(bench)
app.command()(doctor)
app.command()(serve)


def main() -> None:
    """Run the CLI; errors become one line on stderr (EDGESPEC_DEBUG=1 shows the traceback)."""
    debug = settings.debug()
    if sys.stdout is None:  # started with stdout closed (`edgespec run "x" >&-`)
        sys.stderr.write("edgespec: error: standard output is closed; nothing to write to\n")
        sys.exit(1)
    take_any_text(sys.stdout)
    take_any_text(sys.stderr)
    try:
        app(prog_name="edgespec")
    except EdgespecError as exc:
        if debug:
            raise
        sys.stderr.write(f"edgespec: error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        sys.stderr.write(
            f"edgespec: unexpected error: {type(exc).__name__}: {exc} "
            "(set EDGESPEC_DEBUG=1 for the traceback)\n"
        )
        sys.exit(1)
