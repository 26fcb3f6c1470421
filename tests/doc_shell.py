"""The docs' shell and Python snippets, run in a `World`: `edgespec ...` through the command's
entry point on fake models, the pipes and redirections between it and the few commands a
snippet feeds it with (`cat`, `git diff`, `git show`) or reads it with (`jq`), and `curl` or
the openai SDK against the `edgespec serve` before them. Any other command does not run here:
its snippet says so (`<!-- snippet: not run: why -->`)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

from tests.doc_world import GIT_DIFF, Served, World, run_cli

LOOPBACK = {"localhost", "127.0.0.1", "[::1]", "::1"}


class SnippetError(AssertionError):
    """A snippet that does not do what its doc shows."""


def lines(code: str) -> list[str]:
    """A shell snippet's commands: continuation lines joined, blank and comment lines left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [
        line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def _substituted(line: str, folder: Path) -> str:
    """`"$(cat FILE)"` in a double-quoted word, as the shell expands it."""

    def cat(match: re.Match[str]) -> str:
        text = (folder / match.group(1)).read_text().rstrip("\n")
        return re.sub(r'(["$`\\])', r"\\\1", text)

    line = re.sub(r"\$\(cat ([^)\s]+)\)", cat, line)
    if any("$(" in word or "`" in word for word in words(line)):
        raise SnippetError(f"a command substitution other than $(cat FILE): {line}")
    return line


def words(line: str) -> list[str]:
    """A command line's words, its operators (`|`, `<`, `>`, `&&`) words of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|<>&;")
    lexer.whitespace_split = True
    return list(lexer)


@dataclass
class Stage:
    argv: list[str]
    stdin: str | None = None  # `< FILE`
    stdout: str | None = None  # `> FILE`


def pipelines(line: str) -> list[list[Stage]]:
    """The line's `&&`-joined pipelines, each a list of stages with their redirections."""
    found: list[list[Stage]] = [[Stage([])]]
    tokens = iter(words(line))
    for token in tokens:
        stage = found[-1][-1]
        if token == "&&":
            found.append([Stage([])])
        elif token == "|":
            found[-1].append(Stage([]))
        elif token in ("<", ">"):
            setattr(stage, "stdin" if token == "<" else "stdout", next(tokens))
        elif token in ("&", ";", ";;", "||", ">>", "<<"):
            raise SnippetError(f"the shell's {token!r} is not simulated: {line}")
        else:
            stage.argv.append(token)
    return found


class Shell:
    """Runs a shell snippet's lines in a world; `skip`: the commands its marks leave out."""

    def __init__(self, world: World, skip: Sequence[str] = ()) -> None:
        self.world = world
        self.skip = skip
        self.skipped: set[str] = set()
        self.served: Served | None = None
        self.ran: list[str] = []

    def run(self, code: str) -> None:
        todo = lines(code)
        while todo:
            line = todo.pop(0)
            marked = [prefix for prefix in self.skip if line.strip().startswith(prefix)]
            if marked:
                self.skipped.update(marked)
                continue
            line = _substituted(line, self.world.folder)
            if words(line)[:2] == ["edgespec", "serve"] and self.served is None:
                # The lines after `edgespec serve` are its clients: they run while it serves.
                self._serve(line, todo)
                todo = []
            else:
                for pipeline in pipelines(line):
                    self._pipeline(pipeline, line)

    def _serve(self, line: str, clients: list[str]) -> None:
        def answer(served: Served) -> None:
            for client in clients:
                for pipeline in pipelines(_substituted(client, self.world.folder)):
                    self._pipeline(pipeline, client)

        self.serve(line, answer)

    def serve(self, line: str, client: Callable[[Served], None]) -> None:
        """Run `edgespec serve ...` (`line`), `client` talking to it while it serves."""

        def serving(served: Served) -> None:
            self.served = served
            client(served)

        self.world.clients = [serving]
        (pipeline,) = pipelines(line)
        self._pipeline(pipeline, line)
        if self.world.failure is not None:
            raise self.world.failure
        if self.served is None:
            raise SnippetError(f"`{line}` never served")

    def _pipeline(self, stages: list[Stage], line: str) -> None:
        data = self._read(stages[0].stdin) if stages[0].stdin else None
        for i, stage in enumerate(stages):
            last = i == len(stages) - 1
            data = self._stage(stage.argv, data, last and stage.stdout is None, line)
        if stages[-1].stdout:
            (self.world.folder / stages[-1].stdout).write_text(data or "")
        self.ran.append(line)

    def _read(self, name: str) -> str:
        path = self.world.folder / name
        if not path.exists():
            raise SnippetError(f"{name} is not among the files the snippets have (FILES)")
        return path.read_text()

    def _stage(self, argv: list[str], stdin: str | None, tty_out: bool, line: str) -> str:
        name, args = argv[0], argv[1:]
        if name == "edgespec":
            ran = run_cli(args, stdin, tty_out)
            if ran.code != 0:
                raise SnippetError(f"`{line}` exited {ran.code}: {ran.stderr[-2000:]}")
            return ran.stdout
        if name == "cat":
            return "".join(map(self._read, args)) if args else stdin or ""
        if name == "git" and args == ["diff"]:
            return GIT_DIFF
        if name == "git" and args[:1] == ["show"] and len(args) == 2 and ":" in args[1]:
            return self._read(args[1].split(":", 1)[1])
        if name == "jq" and len(args) == 1:
            return jq(args[0], stdin or "")
        if name == "curl":
            return self._curl(args, line)
        raise SnippetError(
            f"`{name}` does not run on the fakes: mark the snippet `<!-- snippet: not run: why"
            f" -->` (or `not run `{name} ...`: why` for some of its lines): {line}"
        )

    def _curl(self, args: list[str], line: str) -> str:
        if self.served is None:
            raise SnippetError(f"`{line}`: no `edgespec serve` before it in the snippet")
        url, method, data, headers = None, "GET", None, {}
        given = iter(args)
        for arg in given:
            if arg in ("-s", "--silent"):
                continue
            if arg in ("-H", "--header"):
                key, _, value = next(given).partition(":")
                headers[key.strip()] = value.strip()
            elif arg in ("-d", "--data"):
                data, method = next(given), "POST" if method == "GET" else method
            elif arg in ("-X", "--request"):
                method = next(given)
            elif arg.startswith("-"):
                raise SnippetError(f"curl's {arg} is not simulated: {line}")
            else:
                url = arg if "://" in arg else f"http://{arg}"
        return request(self.served, method, url or "", data, headers)


def request(
    served: Served, method: str, url: str, data: str | None, headers: dict[str, str]
) -> str:
    """A request to the server on the fakes, refused as a connection would be where the URL
    names another port or a machine other than this one."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK or (parts.port or 80) != served.port:
        raise SnippetError(f"{url}: the server listens on port {served.port} of this machine")
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    with served.client() as client:
        response = client.request(method, path, content=data, headers=headers)
    if response.status_code >= 400:
        raise SnippetError(f"{method} {url}: {response.status_code} {response.text}")
    return str(response.text)


def jq(program: str, text: str) -> str:
    """jq's `.` and `.key.key`: the input must be JSON, and what is indexed an object."""
    if not re.fullmatch(r"\.|(\.\w+)+", program):
        raise SnippetError(f"jq {program!r} is not simulated")
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnippetError(f"jq {program}: the input is not JSON ({exc}): {text[:200]!r}") from exc
    for key in filter(None, program.split(".")):
        if not isinstance(value, dict | None):
            raise SnippetError(f"jq {program}: cannot index {value!r} with {key!r}")
        value = value.get(key) if value is not None else None
    return json.dumps(value) + "\n"


def run_python(code: str, world: World, origin: str) -> None:
    """A Python snippet in a namespace of its own; one that uses the openai SDK runs as a
    client of `edgespec serve` (its defaults), started on the fakes."""
    compiled = compile(code, origin, "exec")
    if "openai" not in code:
        exec(compiled, {"__name__": "__snippet__"})
        return

    import openai

    def client(served: Served) -> None:
        made = _openai_client(openai.OpenAI, served)
        with mock.patch.object(openai, "OpenAI", made):
            exec(compiled, {"__name__": "__snippet__"})

    Shell(world).serve("edgespec serve", client)


def _openai_client(real: Callable[..., Any], served: Served) -> Callable[..., Any]:
    def made(*, base_url: str, **kw: Any) -> Any:
        parts = urlsplit(base_url)
        if parts.hostname not in LOOPBACK or parts.port != served.port:
            raise SnippetError(f"{base_url}: the server listens on port {served.port}")
        return real(base_url=base_url, http_client=served.client(), max_retries=0, **kw)

    return made
