"""Every Python and shell snippet of the docs (README.md, CONTRIBUTING.md, docs/*.md) runs on
fake models, so that a wrong example fails here. A snippet that cannot run on fakes (it needs
the network, a real build, RPC servers, a real model) says so, and why, in an HTML comment
right before its fence:

    <!-- snippet: not run: needs the real llama.cpp build -->

or leaves out only the lines that start with the commands it names:

    <!-- snippet: not run `edgespec pull`, `edgespec doctor`: need the network and the build -->
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests.doc_shell import Shell, SnippetError, run_python
from tests.doc_world import world

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python": "python", "sh": "sh", "bash": "sh", "console": "sh"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!-- snippet: not run((?: `[^`]+`,?)*): (.*?) -->")
MARK_LINE = re.compile(r"^<!-- snippet:.*-->$")


@dataclass(frozen=True)
class Snippet:
    doc: str
    line: int  # of the opening fence
    language: str  # python or sh
    code: str
    not_run: tuple[str, ...] = ()  # why it does not run at all
    skip: tuple[tuple[str, str], ...] = ()  # the commands whose lines do not run, and why

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def _marks(above: list[str]) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """The marks in the lines right above a fence (`above`: the lines before it): the reasons
    it does not run, the commands that do not (with why), and the lines that look like a mark
    but give no reason."""
    not_run: list[str] = []
    skip: list[tuple[str, str]] = []
    wrong: list[str] = []
    for line in reversed([line.strip() for line in above]):
        if not MARK_LINE.match(line):
            break
        found = MARK.fullmatch(line)
        if found is None or not found.group(2).strip():
            wrong.append(line)
            continue
        why, commands = found.group(2).strip(), re.findall(r"`([^`]+)`", found.group(1))
        skip += [(command, why) for command in commands]
        not_run += [] if commands else [why]
    return not_run, skip, wrong


def snippets(doc: Path) -> tuple[list[Snippet], list[str]]:
    """The doc's snippets in Python or shell, and the marks that are wrong (no reason, or a
    mark before a fence of another language) or stray (right before no fence)."""
    text = doc.read_text()
    name = str(doc.relative_to(ROOT))
    found, wrong, used = [], [], set[int]()
    for fence in FENCE.finditer(text):
        above = text[: fence.start()].splitlines()
        not_run, skip, bad = _marks(above)
        wrong += [f"{name}:{len(above) + 1}: {line} (no reason)" for line in bad]
        count = len(not_run) + len({why for _, why in skip}) + len(bad)
        used.update(range(len(above) - count, len(above)))
        language = RUN.get(fence.group(1))
        if count and language is None:
            wrong.append(f"{name}:{len(above) + 1}: a mark before a {fence.group(1)!r} fence")
        if language is not None:
            found.append(
                Snippet(name, len(above) + 1, language, fence.group(2), (*not_run,), (*skip,))
            )
    for number, line in enumerate(text.splitlines()):
        if MARK_LINE.match(line.strip()) and number not in used:
            wrong.append(f"{name}:{number + 1}: {line.strip()} (right before no fence)")
    return found, wrong


ALL = [snippet for doc in DOCS for snippet in snippets(doc)[0]]


def test_the_docs_have_snippets_and_every_mark_gives_a_reason() -> None:
    assert len(ALL) > 20
    assert [w for doc in DOCS for w in snippets(doc)[1]] == []


@pytest.mark.parametrize("snippet", [s for s in ALL if not s.not_run], ids=lambda s: s.id)
def test_every_snippet_that_can_run_on_fakes_runs(snippet: Snippet, tmp_path: Path) -> None:
    with world(tmp_path) as here:
        if snippet.language == "python":
            run_python(snippet.code, here, snippet.id)
            return
        skip = [command for command, _ in snippet.skip]
        shell = Shell(here, skip)
        shell.run(snippet.code)
    assert shell.ran, "nothing of it ran: mark it not run as a whole"
    assert set(skip) == shell.skipped, "a command its mark names is not in it"


OPENAI = (
    "from openai import OpenAI\n"
    "client = OpenAI(base_url='http://127.0.0.1:8080/v1', api_key='unused')\n"
)


def test_a_wrong_example_fails(tmp_path: Path) -> None:
    """The checks find what a doc could get wrong: a flag the command lacks, a bad value, a
    Python call the API does not take, a client sent to the wrong port, an unmarked command
    that cannot run here."""
    wrong = [
        ("sh", 'edgespec run "hi" --no-such-flag'),
        ("sh", 'edgespec run "hi" --drafter magic'),
        ("sh", 'edgespec run "hi" --json-schema person.json | jq .age.years'),
        ("sh", 'edgespec run "hi" | jq .'),
        ("sh", "edgespec serve\ncurl -s localhost:8081/v1/models"),
        ("sh", "scripts/install.sh"),
        ("python", "from edgespec.api import DrafterSpec\nDrafterSpec('auto')"),
        ("python", "from edgespec import Speculator\nSpeculator.load(no_such_option=1)"),
        ("python", OPENAI + "client.chat.completions.create(model='edgespec', messages=[], n=2)"),
    ]
    for language, code in wrong:
        refused = (SnippetError, TypeError, openai.BadRequestError)
        with world(tmp_path) as here, pytest.raises(refused):
            if language == "python":
                run_python(code, here, "wrong")
            else:
                Shell(here).run(code)


def test_marks_are_read_with_their_reasons() -> None:
    text = (
        "<!-- snippet: not run: needs the network -->\n```sh\nedgespec pull\n```\n"
        "<!-- snippet: not run `edgespec pull`, `edgespec doctor`: the hub; the build -->\n"
        "```sh\nedgespec pull\nedgespec doctor\nedgespec models\n```\n"
        "<!-- snippet: not run: -->\n```python\nprint()\n```\n"
        "<!-- snippet: not run: stray -->\n\ntext\n"
    )
    doc = ROOT / "docs" / "x.md"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "read_text", lambda self, *a, **k: text)
        found, wrong = snippets(doc)
    assert [(s.not_run, s.skip) for s in found] == [
        (("needs the network",), ()),
        ((), (("edgespec pull", "the hub; the build"), ("edgespec doctor", "the hub; the build"))),
        ((), ()),
    ]
    assert wrong == [
        "docs/x.md:12: <!-- snippet: not run: --> (no reason)",
        "docs/x.md:15: <!-- snippet: not run: stray --> (right before no fence)",
    ]
