"""Output through pipes whose encoding cannot write every character: Windows' cp1252, where
Python writes a pipe or a file in the ANSI code page and its stdout raises at the first arrow."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from edgespec.cli.console import take_any_text
from tests.conftest import ROOT

TEXT = "→ ✓ 中文\n"
# `edgespec run` on a fake model whose every token is TEXT, with a loading note on stderr that
# holds the same characters; argv[1] "windows" gives it the streams Python on Windows gives a
# pipe (the ANSI code page; stdout strict, stderr with backslash escapes).
SCRIPT = f"""
import io, sys
from edgespec.api import Speculator
from edgespec.cli import loading
from edgespec.cli.app import main
from edgespec.cli.console import err
from tests.fakes import FakeTextModel

class Unicode(FakeTextModel):
    def token_bytes(self, token):
        return {TEXT!r}.encode()

def load(options, drafting):
    err.print("loaded 模型.gguf → ✓")
    return Speculator(Unicode(seed=1, n_ctx=256), None)

loading.load = load
if sys.argv[1] == "windows":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding="cp1252", errors="strict")
    sys.stderr = io.TextIOWrapper(
        sys.stderr.buffer, encoding="cp1252", errors="backslashreplace", line_buffering=True
    )
sys.argv = ["edgespec", "run", "hi", "--drafter", "none", "--max-tokens", "3", "--stats"]
main()
"""


def run(mode: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_a_windows_pipe_gets_utf8(isolated: dict[str, str]) -> None:
    isolated.pop("PYTHONIOENCODING", None)
    proc = run("windows", isolated)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert proc.stdout.decode("utf-8") == TEXT * 3
    err = proc.stderr.decode("utf-8")
    assert "loaded 模型.gguf → ✓" in err and "3 tokens in" in err and "Traceback" not in err


def test_an_encoding_chosen_with_pythonioencoding_is_kept(isolated: dict[str, str]) -> None:
    proc = run("pipe", {**isolated, "PYTHONIOENCODING": "cp1252"})
    err = proc.stderr.decode("cp1252")
    assert proc.returncode == 0, err
    assert proc.stdout.decode("cp1252") == "? ? ??\n" * 3
    assert "loaded \\u6a21\\u578b.gguf \\u2192 \\u2713" in err and "3 tokens in" in err


@pytest.mark.parametrize("tty", [True, False])
def test_a_terminal_keeps_its_encoding(tty: bool) -> None:
    class Stream(io.TextIOWrapper):
        def isatty(self) -> bool:
            return tty

    raw = io.BytesIO()
    stream = Stream(raw, encoding="cp1252", errors="strict")
    take_any_text(stream)
    stream.write("é → ✓")
    stream.flush()
    assert raw.getvalue() == ("é ? ?".encode("cp1252") if tty else "é → ✓".encode())


def test_a_utf8_stream_is_left_alone() -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    take_any_text(stream)
    assert (stream.encoding, stream.errors) == ("utf-8", "strict")
