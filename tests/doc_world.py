"""The world the docs' snippets run in: fake models behind every way a snippet loads them
(`Speculator.load`, `make_plan`, the CLI's loading), the files their commands name, and
`edgespec serve` answering the clients that follow it in-process.

What the docs promise of a real pair (its text, its speed) is not checked here: only that
every example is one the code takes, and runs to its end.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Any
from unittest import mock

import llguidance
import numpy as np
from huggingface_hub import constants

from edgespec.api import DecodeOptions, DecodePlan, Drafting, Speculator
from edgespec.planner.decide import decide
from tests.conftest import ROOT, closed_port
from tests.fakes import fake_plan
from tests.grammars import CHAT_PIECES, ChatGrammarModel, _Toy

# The chat model's pieces, Qwen2.5-Coder's six fill-in-the-middle tokens, end of generation.
FIM = ("pre", "suf", "mid", "pad", "rep", "sep")
PIECES = [*CHAT_PIECES[:-1], *(f"<|fim_{n}|>".encode() for n in FIM), b"<eos>"]
QUOTE, EOS = PIECES.index(b'"'), len(PIECES) - 1

APP = '"""Reading files."""\n' + "".join(
    f"def load_{i}(path):\n    return open(path).read()  # port 8080, entry {i:02}\n\n"
    for i in range(12)
)
# The files the docs' commands read, as a user would have them at hand.
FILES = {
    "app.py": APP,
    "config.py": 'PORT = 8080\n\n\ndef load(path):\n    """Read the config."""\n'
    "    return open(path).read()\n",
    "util.py": "def sub(a, b):\n    return a - b\n",
    "prompt.txt": "Write a haiku about caches.\n",
    "request.txt": "Rename load to read_config. Return the whole file.",
    "letter.txt": "Dear Ana, I am Rui, 34, and I live in Porto now.\n",
    "person.json": '{"type": "object", "properties": {"name": {"type": "string"}, "age": '
    '{"type": "integer"}, "city": {"type": "string"}}, "required": ["name", "age", "city"]}',
    "answer.gbnf": 'root ::= "yes" | "no"\n',
}
# What `git diff` prints in the sandbox: the shell snippets pipe it into a prompt.
GIT_DIFF = "--- a/config.py\n+++ b/config.py\n@@ -1 +1 @@\n-PORT = 8000\n+PORT = 8080\n"


@cache
def _table(seed: int, noise: float, noise_seed: int) -> np.ndarray:
    """A DocModel's logits, a row per two last tokens: made once per process."""
    shape = (len(PIECES) ** 2, len(PIECES))
    table = np.random.default_rng(seed).normal(size=shape) * 3.0
    if noise:
        table += np.random.default_rng(noise_seed).normal(size=shape) * noise
    table[:, QUOTE] += 4.0
    table[:, EOS] += 1.0
    table.flags.writeable = False
    return table


class DocModel(ChatGrammarModel):
    """A chat model that spells any ASCII text and JSON, with fill-in-the-middle tokens that
    end a generation as llama.cpp's do (but the first three) and print nothing. Its rows
    favour a closing quote and the end a little, so that a sentence or a JSON string ends
    within a few dozen tokens as a real model's does."""

    def __init__(self, seed: int = 0, noise: float = 0.0, noise_seed: int = 1, **kw: Any) -> None:
        super().__init__(order=1, **kw)  # its table is replaced by the cached one below
        self.pieces = PIECES
        self.n_vocab = len(PIECES)
        self.eog = EOS
        self._toy = _Toy(PIECES, EOS)
        self.fim_tokens = {name: PIECES.index(f"<|fim_{name}|>".encode()) for name in FIM}
        self.order = 2
        self.table = _table(seed, noise, noise_seed)

    @cached_property
    def grammar_tokenizer(self) -> llguidance.LLTokenizer:
        toy = _Toy(PIECES, EOS)
        toy.special_token_ids = [*self.fim_tokens.values(), EOS]
        return llguidance.LLTokenizer(llguidance.TokenizerWrapper(toy))

    def token_bytes(self, token: int) -> bytes:
        return b"" if token >= self.fim_tokens["pre"] else self.pieces[token]

    def is_eog(self, token: int) -> bool:
        return token >= self.fim_tokens["pad"]


def plan_for(options: DecodeOptions, drafting: Drafting, folder: Path) -> DecodePlan:
    """What `make_plan` decides for these options on a 4-core CPU with room for both models,
    the files being stand-ins in `folder` (as many slots as asked, four when not said)."""
    base = fake_plan()
    resources = replace(
        base.resources,
        n_ctx=options.n_ctx or base.resources.n_ctx,
        slots=options.parallel or 4,
    )
    target, draft = (folder / name for name in ("target.gguf", "draft.gguf"))
    memory = Path(options.memory).expanduser() if options.memory else None
    return decide(drafting, target, draft, resources, base.calibration, memory=memory)


def load(plan: DecodePlan) -> Speculator:
    """The plan's models as fakes: a draft that agrees with the target most of the time."""
    shape = {"n_ctx": plan.resources.n_ctx, "sequences": plan.resources.slots}
    draft = DocModel(seed=1, noise=1.0, noise_seed=2, **shape) if plan.draft else None
    return Speculator(DocModel(seed=1, **shape), draft, plan)


@dataclass
class Served:
    """`edgespec serve`, running on the fakes: its app, and where it listens."""

    app: Any
    host: str
    port: int

    def client(self) -> Any:
        from starlette.testclient import TestClient

        return TestClient(self.app, base_url=f"http://127.0.0.1:{self.port}")


@dataclass
class World:
    """The sandbox a snippet runs in: its folder (the cwd), and what `edgespec serve` does
    while it runs (the clients that follow it)."""

    folder: Path
    clients: list[Callable[[Served], None]] = field(default_factory=list)
    failure: Exception | None = None  # a client's, raised again once the server has stopped

    def plan(
        self, options: DecodeOptions, drafting: Drafting | None = None, **_: object
    ) -> DecodePlan:
        return plan_for(options, drafting or options.drafting or Drafting.of(), self.folder)

    def load(self, options: DecodeOptions, drafting: Drafting) -> Speculator:
        return load(self.plan(options, drafting))

    def serve(self, server: Any) -> None:
        """uvicorn's `Server.run`: the clients are served, then the server stops."""
        config = server.config
        served = Served(config.app, config.host, config.port)
        try:
            for client in self.clients:
                client(served)
        except Exception as exc:  # not the command's error: the snippet's, shown as it is
            self.failure = exc


@contextmanager
def world(folder: Path) -> Iterator[World]:
    """Every way a snippet loads a model gives fakes; the cwd is `folder`, holding the files
    the docs name (and the repository's top-level entries, for the paths into it)."""
    import uvicorn

    import edgespec.bench
    from edgespec.cli import loading

    for name, text in FILES.items():
        (folder / name).write_text(text)
    for name in ("target.gguf", "draft.gguf"):
        (folder / name).write_bytes(b"GGUF stand-in")
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    env = {
        **os.environ,
        "EDGESPEC_HOME": str(folder / ".edgespec"),
        "HF_HOME": str(folder / ".hf"),
        "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "COLUMNS": "100",
    }
    for name in ("EDGESPEC_DEBUG", "EDGESPEC_REGISTRY", "EDGESPEC_API_KEY"):
        env.pop(name, None)
    here = World(folder)

    def speculator(pair: str | None = None, *, plan: DecodePlan | None = None, **kw: Any) -> Any:
        for unused in ("progress", "registry"):  # the plan's files are stand-ins
            kw.pop(unused, None)
        drafting = Drafting.of(
            kw.pop("drafter", "auto"), kw.pop("k", None), keep_draft=kw.pop("keep_draft", False)
        )
        return load(plan or here.plan(DecodeOptions(pair=pair, **kw), drafting))

    with ExitStack() as stack:
        enter = stack.enter_context
        enter(mock.patch.dict(os.environ, env, clear=True))
        hub = str(folder / ".hf")
        enter(mock.patch.multiple(constants, HF_HOME=hub, HF_HUB_CACHE=f"{hub}/hub"))
        enter(mock.patch.object(loading, "load", here.load))
        enter(mock.patch.object(loading, "plan_only", here.plan))
        enter(mock.patch("edgespec.api.make_plan", here.plan))
        enter(mock.patch.object(Speculator, "load", speculator))
        enter(mock.patch.object(uvicorn.Server, "run", lambda server: here.serve(server)))
        # A suite's first prompt stands for it: the options are the docs', not the timings.
        suite = edgespec.bench.load_suite
        enter(mock.patch.object(edgespec.bench, "load_suite", lambda name: suite(name)[:1]))
        cwd = Path.cwd()
        os.chdir(folder)
        try:
            yield here
        finally:
            os.chdir(cwd)


class _Stream(io.TextIOWrapper):
    """A standard stream that is, or is not, a terminal."""

    def __init__(self, data: io.BytesIO, tty: bool) -> None:
        super().__init__(data, encoding="utf-8", write_through=True)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


def run_cli(args: Sequence[str], stdin: str | None, tty_out: bool) -> Ran:
    """`edgespec ARGS` in this process, through the command's own entry point: stdin a
    terminal where nothing is piped in (None), stdout one where `tty_out`."""
    from edgespec.cli.app import main

    out, err = io.BytesIO(), io.BytesIO()
    typed = io.BytesIO((stdin if stdin is not None else "Hello\n").encode())
    streams: dict[str, Any] = {
        "argv": ["edgespec", *args],
        "stdin": _Stream(typed, stdin is None),
        "stdout": _Stream(out, tty_out),
        "stderr": _Stream(err, False),
    }
    code: int | str | None = 0
    with mock.patch.multiple(sys, **streams):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
    return Ran(
        code if isinstance(code, int) else int(code is not None),
        out.getvalue().decode("utf-8", "replace"),
        err.getvalue().decode("utf-8", "replace"),
    )
