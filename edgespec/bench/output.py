"""The benchmark's tables written out: on the terminal, as markdown, as the JSON document, as a
chart; and the check, before measuring, that those files can be written."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from edgespec.bench import report
from edgespec.bench.measure import VALIDATOR
from edgespec.bench.runner import BenchResult
from edgespec.errors import ConfigError
from edgespec.system.device import cores_text


def rich_table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def _comparisons(result: BenchResult) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The tables shown where they have rows: the terminal's title, markdown's, columns, rows."""
    checked = f"answers checked by {VALIDATOR}"
    return [
        (
            f"structured output ({checked})",
            f"Structured output ({checked})",
            report.STRUCTURED_COLUMNS,
            report.structured_rows(result),
        ),
        (
            "auto against the best fixed configuration",
            "Auto against the best fixed configuration in hindsight",
            report.HINDSIGHT_COLUMNS,
            report.hindsight_rows(result),
        ),
        (
            "editing sessions: later turns against the first",
            "Editing sessions: later turns against the first",
            report.SESSION_COLUMNS,
            report.session_rows(result),
        ),
        (
            "auto's round time: predicted against measured",
            "Auto's round time: predicted against measured",
            report.PREDICTION_COLUMNS,
            report.prediction_rows(result),
        ),
        (
            "time outside llama.cpp's decodes per token, by part (ms)",
            "Time outside llama.cpp's decodes per generated token, by part (ms)",
            report.PARTS_COLUMNS,
            report.parts_rows(result),
        ),
    ]


def terminal_tables(result: BenchResult) -> list[Table]:
    """The summary, the comparisons that have rows, and every prompt."""
    summary = (
        "speedup per suite (geometric mean, min-max)",
        report.SUMMARY_COLUMNS,
        report.summary_rows(result),
    )
    shown = [summary, *((t, c, r) for t, _, c, r in _comparisons(result) if r)]
    shown.append(("per prompt", report.PROMPT_COLUMNS, report.prompt_rows(result)))
    return [rich_table(title, columns, rows) for title, columns, rows in shown]


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(result: BenchResult, machine: dict[str, Any]) -> str:
    parts = [
        f"Machine: {machine.get('machine')}, "
        f"{cores_text(machine.get('physical_cores', 0), machine.get('performance_cores'))}, "
        f"{machine.get('total_ram', 0) / 1e9:.1f} GB RAM, backend {machine.get('backend')}.",
        "",
        "### Summary (speedup: geometric mean over prompts, min-max)",
        "",
        markdown_table(report.SUMMARY_COLUMNS, report.summary_rows(result)),
    ]
    for _, title, columns, rows in _comparisons(result):
        if rows:
            parts += ["", f"### {title}", "", markdown_table(columns, rows)]
    per_prompt = markdown_table(report.PROMPT_COLUMNS, report.prompt_rows(result))
    parts += ["", "### Per prompt", "", per_prompt]
    if not result.complete:
        parts += ["", "_Interrupted: partial results._"]
    return "\n".join(parts) + "\n"


def document(
    result: BenchResult, settings: dict[str, Any], machine: dict[str, Any], versions: dict[str, str]
) -> dict[str, Any]:
    """The JSON document of `--json`: every table as records, and every run's raw numbers."""
    return {
        "command": sys.argv,
        "settings": settings,
        "machine": machine,
        "versions": versions | {"python": platform.python_version()},
        "configs": [c.label for c in result.configs],
        "complete": result.complete,
        "summary": _records(report.SUMMARY_COLUMNS, report.summary_rows(result)),
        "hindsight": _records(report.HINDSIGHT_COLUMNS, report.hindsight_rows(result)),
        "sessions": _records(report.SESSION_COLUMNS, report.session_rows(result)),
        "structured": _records(report.STRUCTURED_COLUMNS, report.structured_rows(result)),
        "validator": VALIDATOR,
        "round_time_prediction": _records(
            report.PREDICTION_COLUMNS, report.prediction_rows(result)
        ),
        "outside_ms_per_token": _records(report.PARTS_COLUMNS, report.parts_rows(result)),
        "prompts": [p.as_dict() for p in result.prompts if p.runs],
        "lossless": not result.failures,
    }


def _records(columns: list[str], rows: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(columns, r, strict=True)) for r in rows]


def check_writable(path: Path, option: str) -> None:
    """Refuse an output path that cannot be written, before a long benchmark runs."""
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise ConfigError(f"{option} {path}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{option} {path} cannot be written (permission denied)")


def check_plot_support(path: Path) -> None:
    if path.suffix.lower() not in (".png", ".svg"):
        raise ConfigError(f"--plot writes PNG or SVG, not {path.suffix or 'no extension'}")
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'edgespec[plot]' (or pip install matplotlib)"
        ) from exc


def plot(result: BenchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = report.by_suite(result)
    labels = [c.label for c in result.configs]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(suites) * len(labels) / 3), 4))
    width = 0.8 / len(labels)
    for j, label in enumerate(labels):
        values = [report.geomean([p.speedup(label) for p in ps]) for ps in suites.values()]
        ax.bar([i + j * width for i in range(len(suites))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(suites))], list(suites))
    ax.set_ylabel("speedup vs plain decoding")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
