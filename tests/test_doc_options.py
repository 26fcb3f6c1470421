"""docs/configuration.md says it holds every option of every command and every `EDGESPEC_*`
variable: each command's options (as the CLI defines them) are named in its section or in a
row of the shared table that lists it, each flag a table gives a command is one it has, and
every variable edgespec reads is in the variables' table."""

from __future__ import annotations

import re
from pathlib import Path

from typer.main import get_command

from edgespec.cli.app import app
from edgespec.system import settings

CONFIGURATION = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def cli_options() -> dict[str, set[str]]:
    """Each command's long options (`--temperature` and its alias `--temp`), --help left out."""
    group = get_command(app)
    commands = group.commands  # type: ignore[attr-defined]
    return {
        name: {o for p in cmd.params for o in p.opts if o.startswith("--")} - {"--help"}
        for name, cmd in commands.items()
    }


def sections(text: str) -> dict[str, str]:
    """Each command's section (`## edgespec run [PROMPT]`; `## edgespec models, pull, check`
    for three), by command."""
    found: dict[str, str] = {}
    for heading, body in re.findall(r"^## ([^\n]*)\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        for name in re.findall(r"`(?:edgespec )?(\w+)", heading):
            found[name] = found.get(name, "") + body
    return found


def shared(text: str) -> list[tuple[set[str], set[str]]]:
    """The shared table's rows: their flags, and the commands they name (before any `(`)."""
    table = text.split("## Options shared by several commands", 1)[1].split("\n\n", 2)[1]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `--")]
    return [(set(FLAG.findall(r[0])), set(re.findall(r"\w+", r[1].split("(")[0]))) for r in rows]


def undocumented(text: str, options: dict[str, set[str]]) -> dict[str, list[str]]:
    body, rows = sections(text), shared(text)
    missing = {}
    for command, flags in options.items():
        named = set(FLAG.findall(body.get(command, "")))
        named |= {f for row_flags, commands in rows if command in commands for f in row_flags}
        missing[command] = sorted(flags - named)
    return {command: flags for command, flags in missing.items() if flags}


def wrongly_given(text: str, options: dict[str, set[str]]) -> list[str]:
    """Flags a table gives a command that it does not have."""
    wrong = [
        f"{command} {flag}"
        for flags, commands in shared(text)
        for command in commands
        for flag in flags - options.get(command, set())
    ]
    for command, body in sections(text).items():
        rows = [line.split(" | ")[0] for line in body.splitlines() if line.startswith("| `--")]
        given = {flag for row in rows for flag in FLAG.findall(row)}
        wrong += [f"{command} {flag}" for flag in given - options.get(command, set())]
    return sorted(wrong)


def test_configuration_md_names_every_option_of_every_command() -> None:
    text, options = CONFIGURATION.read_text(), cli_options()
    assert set(options) <= set(sections(text)), "a command without a section"
    assert undocumented(text, options) == {}
    assert wrongly_given(text, options) == []


def test_configuration_md_names_every_variable() -> None:
    names = {v for k, v in vars(settings).items() if k.isupper() and isinstance(v, str)}
    assert names and sorted(n for n in names if f"`{n}" not in CONFIGURATION.read_text()) == []


def test_the_checks_see_a_missing_or_a_made_up_option() -> None:
    text = (
        "## Options shared by several commands\n\n| option | commands | meaning |\n|---|---|---|\n"
        "| `--pair` NAME | run, bench (`plan`: first argument) | a pair |\n\n"
        "## `edgespec run [PROMPT]`\n\n| option | default | meaning |\n|---|---|---|\n"
        "| `--seed` N | - | x |\n| `--colour` | - | y |\n\n## `edgespec plan [PAIR]`\n\n`--json`.\n"
    )
    options = {"run": {"--pair", "--seed", "--stats"}, "plan": {"--json"}}
    assert undocumented(text, options) == {"run": ["--stats"]}
    assert wrongly_given(text, options) == ["bench --pair", "run --colour"]
