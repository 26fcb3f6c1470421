"""The user docs (README.md, docs/*.md) name only what exists: every repository path and link
resolves, and every `edgespec ...` command they show uses a subcommand and flags the CLI has
(those its --help lists).

A file of the lab archive is named as `lab/edgespec-lab-c2b18c1.tar.xz:benchmarks/results.md`
(the archive, a colon, the member's path): checked against the archive's list of members, not
the tree."""

from __future__ import annotations

import re
import tarfile
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgespec.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
# A path into the repository, as the docs write one (not a URL's, not a file of the user's).
PATH = re.compile(
    r"(?<![\w/.~:-])((?:edgespec|docs|scripts|benchmarks|tests|lab|\.ci)/[\w./-]*\w/?)"
)
# A file of the lab archive: the archive, a colon, the file's path in it.
ARCHIVED = re.compile(r"(?<![\w/.~:-])(lab/[\w.-]+\.tar\.xz):([\w./-]*\w/?)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
# `edgespec` then its words, up to a pipe, a redirection or the end (not `from edgespec import`).
COMMAND = re.compile(r"(?<![\w/.-])(?<!from )(?<!import )edgespec((?: +[^\s|;&>#`]+)*)")
COMMENT = re.compile(r"(^|\s)#.*$", re.M)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def links(text: str) -> list[str]:
    """The relative link targets of a markdown text, without their #anchor."""
    found = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        found.append(target.split("#")[0])
    return found


def headings(text: str) -> set[str]:
    """The anchors of a markdown text's headings, as GitHub makes them."""
    titles = re.findall(r"^#+ (.*)$", FENCE.sub("", text), re.M)
    return {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}


def anchors(doc: Path, text: str) -> list[str]:
    """The links of `doc` to a heading of a markdown file that has no such heading."""
    missing = []
    for target in LINK.findall(text):
        path, _, anchor = target.partition("#")
        file = doc.parent / path if path else doc
        if anchor and file.suffix == ".md" and file.exists():
            missing += [] if anchor in headings(file.read_text()) else [target]
    return missing


def paths(text: str) -> list[str]:
    """The repository paths a text names outside its links (`docs/usage.md`, scripts/x.py),
    placeholders in capitals (benchmarks/NAME.json) left out."""
    prose = LINK.sub("]()", text)
    return [p for p in PATH.findall(prose) if not re.search(r"[A-Z]{3,}", p)]


def archived(text: str) -> list[tuple[str, str]]:
    """The files of an archive a text names (`lab/NAME.tar.xz:benchmarks/x.md`): (archive,
    member) pairs, placeholders in capitals (`lab/NAME.tar.xz:PATH`) left out."""
    found = ARCHIVED.findall(LINK.sub("]()", text))
    return [(a, m) for a, m in found if not re.search(r"[A-Z]{3,}", m)]


@cache
def members(archive: str) -> frozenset[str]:
    """An archive's files and the folders they are in."""
    with tarfile.open(ROOT / archive) as tar:
        names = {m.name.rstrip("/") for m in tar.getmembers()}
    return frozenset(names | {str(p) for n in names for p in Path(n).parents})


def missing_members(text: str) -> list[str]:
    """The archive files a text names that its archive does not hold."""
    return [
        f"{archive}:{member}"
        for archive, member in archived(text)
        if not (ROOT / archive).exists() or member.rstrip("/") not in members(archive)
    ]


def commands(text: str) -> list[list[str]]:
    """Every `edgespec ...` command in the text's code (fenced blocks, their continuation lines
    joined, and inline spans), as its words after `edgespec`."""
    code = [COMMENT.sub("", block.replace("\\\n", " ")) for block in FENCE.findall(text)]
    code += INLINE.findall(FENCE.sub("", text))
    found = [m.split() for piece in code for m in COMMAND.findall(piece)]
    # Not a command: its output (`edgespec 0.1.0 · ...`), or a placeholder (`edgespec COMMAND`).
    return [w for w in found if not (w and re.match(r"^(\d|[A-Z]{3,})", w[0]))]


def _help(*words: str) -> str:
    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def _rows(help_text: str, box: str) -> list[list[str]]:
    """The rows of one of --help's boxes ("Options", "Commands"), as their words."""
    rows, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("╭─"):
            inside = line.startswith(f"╭─ {box} ")
        elif inside and line.startswith("│"):
            rows.append(line.strip("│ ").split())
    return rows


class Cli:
    """The subcommands and flags `edgespec --help` and `edgespec COMMAND --help` list."""

    def __init__(self) -> None:
        self.commands = {row[0] for row in _rows(_help(), "Commands") if row}
        self.top = self._flags(_help())
        self._options: dict[str, set[str]] = {}

    @staticmethod
    def _flags(help_text: str) -> set[str]:
        flags = set()
        for row in _rows(help_text, "Options"):
            for word in row:  # a row starts with its flags: --offline/--no-offline  -m
                if not word.startswith("-"):
                    break
                flags |= set(word.replace(",", "/").split("/"))
        return flags - {""}

    def options(self, command: str) -> set[str]:
        if command not in self._options:
            self._options[command] = self._flags(_help(command))
        return self._options[command]


def problems(words: list[str], cli: Cli) -> list[str]:
    """What in `edgespec WORDS` the CLI does not have: the subcommand, or a flag of it."""
    if not words or words[0].startswith("-"):
        return [f"edgespec has no {w}" for w in words if w.split("=")[0] not in cli.top]
    if words[0] not in cli.commands:
        return [f"no command {words[0]!r}"]
    options = cli.options(words[0])
    flags = [w.split("=")[0] for w in words[1:] if re.match(r"^--?[a-zA-Z]", w)]
    return [f"{words[0]} has no {flag}" for flag in flags if flag not in options]


@pytest.fixture(scope="module")
def cli() -> Cli:
    return Cli()


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_link_and_path_the_docs_name_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = [t for t in links(text) if not (doc.parent / t).exists()]
    missing += [p for p in paths(text) if not (ROOT / p.rstrip("/.")).exists()]
    missing += missing_members(text)
    missing += anchors(doc, text)
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_edgespec_command_the_docs_show_is_one_the_cli_has(doc: Path, cli: Cli) -> None:
    wrong = {" ".join(words): problems(words, cli) for words in commands(doc.read_text())}
    assert {shown: why for shown, why in wrong.items() if why} == {}


def test_the_checks_find_what_does_not_exist(cli: Cli) -> None:
    text = (
        "Run `edgespec run --drafter auto --no-such-flag`, or\n```sh\nedgespec serve \\\n"
        "  --port 8080 --colour  # edgespec run --not-this\nedgespec frobnicate\nedgespec 0.1.0 ·"
        " llama.cpp\n```\n`from edgespec import Speculator`, `edgespec COMMAND --help`. See"
        " scripts/heavy_pair.py and "
        "[the table](../benchmarks/nothing.md); docs/usage.md exists, benchmarks/NAME.json is"
        " a placeholder. lab/edgespec-lab-c2b18c1.tar.xz:benchmarks/results.md and"
        " lab/edgespec-lab-c2b18c1.tar.xz:benchmarks/nothing.md are in the archive.\n"
    )
    found = {" ".join(w): problems(w, cli) for w in commands(text)}
    assert found == {
        "serve --port 8080 --colour": ["serve has no --colour"],
        "frobnicate": ["no command 'frobnicate'"],
        "run --drafter auto --no-such-flag": ["run has no --no-such-flag"],
    }
    archive = "lab/edgespec-lab-c2b18c1.tar.xz"
    assert paths(text) == ["scripts/heavy_pair.py", "docs/usage.md", archive, archive]
    assert archived(text) == [
        (archive, "benchmarks/results.md"),
        (archive, "benchmarks/nothing.md"),
    ]
    assert missing_members(text) == [f"{archive}:benchmarks/nothing.md"]
    assert missing_members(f"{archive}:benchmarks/overhead/ and {archive}:scripts/") == []
    assert links(text) == ["../benchmarks/nothing.md"]
    doc = ROOT / "docs" / "usage.md"
    assert anchors(doc, "[a](performance.md#no-such-heading) [b](#using-edgespec)") == [
        "performance.md#no-such-heading"
    ]
