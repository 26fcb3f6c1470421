"""What arrives from outside the process, bounded and made safe (issue 50, finding 7): stdin and
grammar and schema files read under a cap, GBNF converted in linear time, a torn `--memory`
line losing itself only, model text that cannot drive the terminal, the chat's /schema."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from llguidance import gbnf_to_lark as gbnf

from edgespec.api import Speculator, TokenEvent
from edgespec.cli import loading, run_cmd
from edgespec.cli.chat_repl import ChatRepl
from edgespec.cli.render import JsonRenderer, TextRenderer
from edgespec.errors import ConfigError
from edgespec.text import bounded_input as bounded
from edgespec.text.conversation import Conversation
from edgespec.text.gbnf import to_lark
from edgespec.text.grammar import MAX_GRAMMAR_CHARS, Grammar, GrammarError
from edgespec.text.project_memory import ProjectMemory
from tests.conftest import ROOT, edgespec_here
from tests.grammars import GrammarChatModel

# --- stdin -----------------------------------------------------------------------------------


class Endless(io.RawIOBase):
    """`yes`: lines of "y" up to `size` bytes (a bound, so that a reader that takes it all
    ends), counting what was read."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.size - self.taken)
        buffer[:n] = b"y\n" * (n // 2) + b"y" * (n % 2)
        self.taken += n
        return n


def test_stdin_is_read_no_further_than_the_context_could_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = run_cmd.stdin_limit(None)
    assert limit == 4096 * run_cmd.CHARS_PER_TOKEN == 1 << 20  # the default context's
    yes = Endless(16 * limit)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(yes)))
    with pytest.raises(ConfigError) as caught:
        run_cmd.build_prompt("hi", limit)
    assert str(caught.value) == (
        "stdin holds more than 1,048,576 characters: more than a 4,096-token context can "
        "hold; a larger --ctx-size allows 256 characters a token"
    )
    assert yes.taken <= limit + 2 * bounded.CHUNK


def test_a_larger_context_takes_a_larger_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "word " * 300_000  # 1.5 M characters
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert run_cmd.build_prompt("sum up", run_cmd.stdin_limit(8192)) == f"sum up\n\n{text}"


def test_run_refuses_a_stdin_past_the_cap_before_anything_loads(
    isolated: dict[str, str],
) -> None:
    res = edgespec_here("run", "hi", env=isolated, input=b"y\n" * (1 << 20))
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "edgespec: error: stdin holds more than 1,048,576 characters: more than a "
        "4,096-token context can hold; a larger --ctx-size allows 256 characters a token"
    ]
    assert not Path(isolated["EDGESPEC_HOME"]).exists()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"text\x00more", "stdin holds binary data (NUL bytes)"),
        (b"caf\xc3\xa9 \xff", "stdin is not UTF-8 text (bad byte at offset 6)"),
        (b"x" * (bounded.CHUNK - 1) + "é".encode() + b"\xff", "at offset 65537"),
        (b"cut \xc3", "stdin is not UTF-8 text (it ends inside a character)"),
    ],
)
def test_stdin_that_is_not_text_is_refused_where_it_goes_wrong(data: bytes, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        bounded.read_text(io.BytesIO(data), 1 << 20, "stdin")


def test_a_character_cut_between_two_chunks_is_read_whole() -> None:
    data = b"x" * (bounded.CHUNK - 1) + "é".encode() + b"z"
    assert bounded.read_text(io.BytesIO(data), 1 << 20, "stdin") == data.decode()


# --- grammar and schema files ---------------------------------------------------------------


def _peak(make: Callable[[], object]) -> tuple[int, Exception | None]:
    """The most memory Python held while `make` ran, and what it raised."""
    tracemalloc.start()
    try:
        make()
        raised = None
    except Exception as exc:
        raised = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, raised


@pytest.mark.parametrize(
    ("read", "option"),
    [
        (Grammar.from_gbnf_file, "--grammar"),
        (lambda p: Grammar.from_schema_option(str(p)), "--json-schema"),
    ],
)
def test_a_grammar_or_schema_file_is_refused_past_the_cap_without_reading_it_all(
    tmp_path: Path, read: Callable[[Path], Grammar], option: str
) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b'root ::= "' + b"a" * (32 * MAX_GRAMMAR_CHARS) + b'"\n')
    peak, raised = _peak(lambda: read(path))
    # Read whole, the file alone is 32 MB, and its text as much again.
    assert peak < 8 * MAX_GRAMMAR_CHARS
    assert isinstance(raised, GrammarError)
    assert str(raised) == f"{option} {path} holds more than 1,000,000 characters"
    assert raised.field == option


def test_a_grammar_file_with_nul_bytes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "g.gbnf"
    path.write_bytes(b'root ::= "a"\x00\n')
    with pytest.raises(GrammarError, match="binary data"):
        Grammar.from_gbnf_file(path)
    path.write_bytes(b'root ::= "a"\n')
    assert Grammar.from_gbnf_file(path).label == f"the grammar in {path}"


# --- GBNF conversion ------------------------------------------------------------------------


def _chain(n: int, end: str = '"z"') -> str:
    """A chain of `n` rules, each referring to the next: the shape that was quadratic."""
    rules = [f'r{i} ::= "x{i}" r{i + 1} | "y"' for i in range(n)]
    return "\n".join(["root ::= r0", *rules, f"r{n} ::= {end}"]) + "\n"


GRAMMARS = [
    _chain(40),
    _chain(40, '"z" root'),  # a cycle through the start rule: no terminals
    _chain(5, "r0"),  # a cycle without it
    'root ::= item+ "."\nitem ::= [a-z]+ sep?\nsep ::= ", " | "; "\n',
    'root ::= "(" (expr ("," expr)*)? ")"\nexpr ::= num | root\nnum ::= [0-9]{1,3}\n',
    'root ::= a b\nb ::= a\na ::= "x" # a comment\nunused ::= root\n',
    'root ::= fooBar\nfooBar ::= "\\x41" [^"\\\\]* "\\u00e9"\n',
    'start: "a" b\nb: "c"\n',  # Lark already
]


@pytest.mark.parametrize("text", GRAMMARS)
def test_gbnf_converts_as_llguidance_converts_it(text: str) -> None:
    assert to_lark(text) == gbnf.any_to_lark(text)


def test_gbnf_conversion_is_linear_in_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work counted, not timed: how often a rule reference is asked whether its rule is a
    terminal. A chain of N rules asked it about N²/2 times (2,000 rules: 2.7 s of CPU)."""
    asked = 0
    plain = gbnf.RuleRefNode.is_terminal

    def counted(self: gbnf.RuleRefNode) -> bool:
        nonlocal asked
        asked += 1
        return plain(self)

    monkeypatch.setattr(gbnf.RuleRefNode, "is_terminal", counted)
    for n in (200, 400):
        asked = 0
        Grammar.gbnf(_chain(n))
        assert asked <= 2 * (n + 2)


# --- --memory -------------------------------------------------------------------------------


def test_a_torn_memory_line_loses_itself_only(tmp_path: Path) -> None:
    memory = ProjectMemory(tmp_path, "model")
    memory.add([1, 2, 3])
    with memory.path.open("ab") as f:
        f.write(b"[4,5,")  # a write cut short: a crash, a full disk
    memory.add([6, 7])
    memory.add([8])
    assert memory.load() == [[1, 2, 3], [6, 7], [8]]
    assert memory.path.read_bytes() == b"[1,2,3]\n[4,5,\n[6,7]\n[8]\n"


# --- model text on a terminal ---------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


HOSTILE = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\rhidden\x9b31m\x7f\tdone\n"


def _render(stream: io.StringIO, **kw: bool) -> str:
    render = TextRenderer(stream, show_draft=False, **kw)
    for piece in (HOSTILE[:5], HOSTILE[5:]):
        render(TokenEvent(token=1, text=piece, from_draft=False))
    render.close()
    return stream.getvalue()


def test_control_sequences_in_model_text_are_shown_not_run_on_a_terminal() -> None:
    assert _render(Terminal()) == "ok^[]52;c;cm0gLXJmIH4=^G^[[2J^MhiddenM-^[31m^?\tdone\n"


def test_a_pipe_and_raw_control_get_the_text_as_it_is() -> None:
    assert _render(io.StringIO()) == HOSTILE
    assert _render(Terminal(), raw_control=True) == HOSTILE


def test_colours_for_the_draft_wrap_the_escaped_text() -> None:
    stream = Terminal()
    TextRenderer(stream, show_draft=True)(TokenEvent(token=1, text="a\x1bb", from_draft=True))
    assert "a^[b" in stream.getvalue() and stream.getvalue().startswith("\x1b[32m")


def test_json_lines_on_a_terminal_escape_the_c1_controls_too() -> None:
    for stream in (Terminal(), io.StringIO()):
        JsonRenderer(stream)(TokenEvent(token=1, text=HOSTILE, from_draft=False))
        assert json.loads(stream.getvalue())["text"] == HOSTILE
        assert ("\x9b" in stream.getvalue()) is not stream.isatty()
        assert "\x1b" not in stream.getvalue()


def test_the_chat_escapes_its_answers_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)

    class Conv:
        max_tokens = 10
        drafter = "none"

        def prepare(self, text: str) -> tuple[list[int], int]:
            return [1], 0

        def answer(self, text: str, tokens: list[int]):  # type: ignore[no-untyped-def]
            yield TokenEvent(token=1, text="\x1b[2Jhi", from_draft=False)
            written.append(text)

    for raw, shown in ((False, "^[[2Jhi"), (True, "\x1b[2Jhi")):
        repl = ChatRepl(None, Conv(), False, False, "t", raw_control=raw)  # type: ignore[arg-type]
        repl._answer("q")
        assert terminal.getvalue().endswith(f"{shown}\n")
    assert written == ["q", "q"]


def test_run_takes_raw_control(isolated: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        loading, "load", lambda options, drafting: Speculator(GrammarChatModel(seed=5), None)
    )
    res = edgespec_here("run", "ab", "--raw-control", "--json-object", "-d", "ngram", env=isolated)
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout), dict)


# --- the chat's /schema ---------------------------------------------------------------------


def test_chat_schema_reads_a_file_under_home_and_names_itself_in_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "s.json").write_text(json.dumps({"type": "object"}))
    conv = Conversation(Speculator(GrammarChatModel(seed=5), None))
    repl = ChatRepl(conv.spec, conv, show_draft=False, stats=False, label="test")
    repl._command("/schema ~/s.json")
    assert capsys.readouterr().err.strip() == (
        "(answers follow the JSON schema in ~/s.json; /schema off for free text)"
    )
    assert conv.grammar is not None
    repl._command("/schema ~/missing.json")
    said = capsys.readouterr().err.strip()
    assert said.startswith("error: /schema ~/missing.json: cannot be read (No such file")
    assert "--json-schema" not in said


# --- deep grammars --------------------------------------------------------------------------

DEEP = """
import json, sys, threading
from edgespec.text.grammar import Grammar, GrammarError
from tests.grammars import GrammarModel
from tests.test_inputs import _chain

n = 700
defs = {f"d{i}": {"anyOf": [{"type": "null"}, {"type": "array",
        "items": {"$ref": f"#/$defs/d{i + 1}"}}]} for i in range(n)}
defs[f"d{n}"] = {"type": "integer"}
schema = {"$ref": "#/$defs/d0", "$defs": defs}
# On a thread, as the server checks a request's schema (asyncio.to_thread).
thread = threading.Thread(target=lambda: Grammar.json_schema(schema))
thread.start()
thread.join()
try:  # the toy vocabulary has no `[`: refused, with a reason
    Grammar.json_schema(schema).compile(GrammarModel().grammar_tokenizer)
except GrammarError as exc:
    print(exc)
Grammar.gbnf(_chain(3000, '"z" root'))
print("done")
"""


def test_a_grammar_deeper_than_a_threads_stack_is_used_or_refused_not_a_crash() -> None:
    """A chain of 700 `$ref`s (a 65 KB schema) overflowed llguidance's recursion on an 8 MB
    stack: the process died of a segmentation fault."""
    res = subprocess.run(
        [sys.executable, "-c", DEEP], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == ["the JSON schema cannot be used: NoExtensionBias", "done"]
