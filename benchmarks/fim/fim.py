"""Fill-in-the-middle as an editor asks for it: spans cut from the standard library's own Python
files, completed through `/infill` by edgespec (`none` and `auto`) and by llama.cpp's
`llama-server` (plain and its speculative settings), side by side.

    python benchmarks/fim/fim.py --llama-bin DIR [--spans 60] [--seed 52] [--n-predict 64]
        [--prefix-lines 32] [--suffix-lines 8] [--threads 2] [--llama TYPE ...]
        [--json FILE] [--markdown FILE]
    python benchmarks/fim/fim.py --url NAME=URL ...   # servers already running, none started

Without --llama-bin, edgespec's configurations alone.

DIR holds `llama-server` built from the llama.cpp llama-cpp-python vendors
(`scripts/build_llama_tools.sh llama-server`). A span is a single line, a block of 2 to 5
statements, or a function's body (after its docstring), chosen at seeded places in files of
`sysconfig.get_paths()["stdlib"]` (tests left out). The span's lines are taken out and the
cursor stands on the empty line left, as a user who starts to write them: the request is the one
llama.vim builds there (its `input_prefix`, `prompt`, `input_suffix`, the lines around the cursor
bounded by --prefix-lines and --suffix-lines), greedy, at most --n-predict tokens, no time
budget (so that every server writes the same text).

Each configuration is its own server process (so no server finds another configuration's
prompt in its cache); every span goes to every configuration, one request at a time, in an
order that rotates from span to span. Reported per configuration: latency to the whole
completion (p50, p95: the client's wall time of the request), generation tokens/s (its
tokens over the generation time the server reports, summed over the spans), and for edgespec's
`auto` the spans whose text is exactly `none`'s.
"""

from __future__ import annotations

import argparse
import ast
import json
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KINDS = ("line", "block", "body")
# Directories of the standard library that hold tests, not library code.
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
BLOCK_STATEMENTS = (2, 5)
BLOCK_LINES = (2, 10)
BODY_LINES = (2, 16)
# llama-server's settings compared: its plain decoding, its draft model at its default draft
# length (3) and at 8, and the n-gram types of this llama.cpp that need no model of their own.
LLAMA_CONFIGS: dict[str, list[str]] = {
    "plain": [],
    "draft-simple": ["--spec-type", "draft-simple"],
    "draft-simple k=8": ["--spec-type", "draft-simple", "--spec-draft-n-max", "8"],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-map-k": ["--spec-type", "ngram-map-k"],
    "ngram-map-k4v": ["--spec-type", "ngram-map-k4v"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-cache": ["--spec-type", "ngram-cache"],
}
NEEDS_DRAFT = ("draft-simple",)
# A request before the spans, of text none of them has (so no span finds its prompt cached).
WARM_UP = {"input_prefix": "def warm_up():\n", "input_suffix": "\n", "n_predict": 4}


@dataclass(frozen=True)
class Span:
    """A gap in a file and the request around it. `expected` is the text taken out."""

    id: str
    file: str
    kind: str
    line: int  # the cursor's line (1-based) in the file with the span taken out
    input_prefix: str
    prompt: str
    input_suffix: str
    expected: str


def stdlib_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(root).parts[:-1])
    )


def _bodies(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    """The statement lists inside functions (where editors complete most)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                for field in ("body", "orelse", "finalbody"):
                    body = getattr(inner, field, None)
                    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                        yield body


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def candidates(tree: ast.AST, kind: str) -> list[tuple[int, int]]:
    """The (first, last) lines, 1-based, of every span of `kind` in the module."""
    found: set[tuple[int, int]] = set()
    for body in _bodies(tree):
        if kind == "line":
            found |= {
                (s.lineno, s.lineno)
                for s in body
                if s.lineno == s.end_lineno and not _is_docstring(s) and not hasattr(s, "body")
            }
        elif kind == "block":
            lo, hi = BLOCK_STATEMENTS
            for i in range(len(body)):
                for n in range(lo, hi + 1):
                    part = body[i : i + n]
                    if len(part) == n and not _is_docstring(part[0]):
                        first, last = part[0].lineno, part[-1].end_lineno or part[-1].lineno
                        if BLOCK_LINES[0] <= last - first + 1 <= BLOCK_LINES[1]:
                            found.add((first, last))
    if kind == "body":
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                stmts = node.body[1:] if _is_docstring(node.body[0]) else node.body
                if stmts:
                    first, last = stmts[0].lineno, stmts[-1].end_lineno or stmts[-1].lineno
                    if BODY_LINES[0] <= last - first + 1 <= BODY_LINES[1]:
                        found.add((first, last))
    return sorted(found)


def make_span(
    lines: list[str],
    first: int,
    last: int,
    *,
    name: str,
    kind: str,
    prefix_lines: int,
    suffix_lines: int,
) -> Span:
    """The span of lines first..last taken out, the cursor on the empty line left where it was:
    llama.vim's local context there (s:fim_ctx_local: for a blank current line, no text of it
    before or after the cursor)."""
    before = lines[max(0, first - 1 - prefix_lines) : first - 1]
    after = lines[last : last + suffix_lines]
    return Span(
        id=f"{name}:{first}-{last}",
        file=name,
        kind=kind,
        line=first,
        input_prefix="\n".join(before) + "\n",
        prompt="",
        input_suffix="\n" + "\n".join(after) + "\n",
        expected="\n".join(lines[first - 1 : last]),
    )


def cut_spans(
    root: Path, n: int, seed: int, *, prefix_lines: int = 32, suffix_lines: int = 8
) -> list[Span]:
    """`n` spans, the kinds in turn, each from a file and a place the seed picks."""
    rng = random.Random(seed)
    files = stdlib_files(root)
    spans: list[Span] = []
    seen: set[str] = set()
    while len(spans) < n:
        kind = KINDS[len(spans) % len(KINDS)]
        path = rng.choice(files)
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        found = candidates(tree, kind)
        if not found:
            continue
        first, last = rng.choice(found)
        name = path.relative_to(root).as_posix()
        span = make_span(
            text.split("\n"),
            first,
            last,
            name=name,
            kind=kind,
            prefix_lines=prefix_lines,
            suffix_lines=suffix_lines,
        )
        if span.id not in seen and span.expected.strip():
            seen.add(span.id)
            spans.append(span)
    return spans


def request_body(span: Span, n_predict: int) -> dict[str, Any]:
    """llama.vim's /infill request at the span's cursor, greedy and without a time budget."""
    return {
        "input_prefix": span.input_prefix,
        "input_suffix": span.input_suffix,
        "input_extra": [],
        "prompt": span.prompt,
        "n_predict": n_predict,
        "n_indent": 0,
        "temperature": 0.0,
        "top_k": 1,
        "samplers": ["top_k"],
        "stream": False,
        "cache_prompt": True,
        "t_max_predict_ms": 0,
    }


def post(url: str, body: dict[str, Any], timeout: float = 600) -> tuple[float, dict[str, Any]]:
    """The answer to one request and the client's wall time for it."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as res:
        doc = json.loads(res.read())
    return time.perf_counter() - start, doc


def one_run(url: str, body: dict[str, Any]) -> dict[str, Any]:
    latency, doc = post(url + "/infill", body)
    timings = doc.get("timings", {})
    return {
        "latency_s": latency,
        "content": doc["content"],
        "tokens": int(timings.get("predicted_n", doc.get("tokens_predicted", 0))),
        "gen_s": float(timings.get("predicted_ms", 0.0)) / 1000,
        "prompt_n": int(timings.get("prompt_n", 0)),
        "prompt_s": float(timings.get("prompt_ms", 0.0)) / 1000,
        "drafted": int(timings.get("draft_n", 0)),
        "accepted": int(timings.get("draft_n_accepted", 0)),
        "stop_type": doc.get("stop_type"),
    }


def run_all(
    servers: dict[str, str],
    spans: Sequence[Span],
    n_predict: int,
    done: Callable[[dict[str, dict[str, Any]]], None] = lambda runs: None,
    log: Any = sys.stderr,
) -> dict[str, dict[str, Any]]:
    """Every span through every server, one request at a time, the order rotating; `done`
    gets the runs so far after each span (a long run on a busy machine keeps what it did)."""
    names = list(servers)
    runs: dict[str, dict[str, Any]] = {}
    for i, span in enumerate(spans):
        body = request_body(span, n_predict)
        order = names[i % len(names) :] + names[: i % len(names)]
        runs[span.id] = {name: one_run(servers[name], body) for name in order}
        row = " ".join(f"{n}={runs[span.id][n]['latency_s']:.2f}s" for n in names)
        print(f"[{i + 1}/{len(spans)}] {span.kind} {span.id}: {row}", file=log, flush=True)
        done(runs)
    return runs


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile, linearly between the nearest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(runs: dict[str, dict[str, Any]], spans: Sequence[Span]) -> dict[str, Any]:
    """Per configuration, over all spans and per kind of span."""
    names = list(next(iter(runs.values())))
    spans = [s for s in spans if s.id in runs]
    groups = {"all": [s.id for s in spans]} | {
        k: [s.id for s in spans if s.kind == k] for k in KINDS
    }
    out: dict[str, Any] = {}
    for group, ids in groups.items():
        if not ids:
            continue
        out[group] = {}
        for name in names:
            rows = [runs[i][name] for i in ids]
            latency = [r["latency_s"] for r in rows]
            tokens, gen_s = sum(r["tokens"] for r in rows), sum(r["gen_s"] for r in rows)
            out[group][name] = {
                "spans": len(rows),
                "p50_s": statistics.median(latency),
                "p95_s": quantile(latency, 0.95),
                "tokens": tokens,
                "gen_tok_s": tokens / gen_s if gen_s else None,
                "whole_tok_s": tokens / sum(latency),
                "accepted_of_drafted": _ratio(rows),
            }
    return out


def _ratio(rows: Sequence[dict[str, Any]]) -> float | None:
    drafted = sum(r["drafted"] for r in rows)
    return sum(r["accepted"] for r in rows) / drafted if drafted else None


def exact_matches(runs: dict[str, dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    """The spans whose texts from configurations a and b are the same."""
    differ = [i for i, r in runs.items() if r[a]["content"] != r[b]["content"]]
    return {"of": len(runs), "same": len(runs) - len(differ), "differ": differ}


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "| spans | configuration | p50 latency (s) | p95 latency (s) | gen tok/s | tokens "
        "| accepted / drafted |",
        "|---|---|---|---|---|---|---|",
    ]
    for group, by_name in doc["summary"].items():
        for name, s in by_name.items():
            acc = "" if s["accepted_of_drafted"] is None else f"{s['accepted_of_drafted']:.2f}"
            tok_s = "" if s["gen_tok_s"] is None else f"{s['gen_tok_s']:.1f}"
            lines.append(
                f"| {group} ({s['spans']}) | {name} | {s['p50_s']:.2f} | {s['p95_s']:.2f} "
                f"| {tok_s} | {s['tokens']} | {acc} |"
            )
    for pair, m in doc["exact_match"].items():
        lines.append(f"\n{pair}: {m['same']} of {m['of']} spans the same text.")
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def started(name: str, command: list[str], port: int) -> Iterator[str]:
    """A server process, up (its /health answers 200) until the block ends. Its log goes to a
    file: llama-server logs every request, and a pipe nobody reads would stop it once full."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    raise SystemExit(f"{name} exited: {err[-2000:]}")
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2) as res:
                        if res.status == 200:
                            break
                except (OSError, urllib.error.HTTPError):
                    time.sleep(0.5)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def server_commands(args: argparse.Namespace, pair: tuple[Path, Path]) -> dict[str, list[str]]:
    """The command of each configuration's server, without its port."""
    target, draft = (str(p) for p in pair)
    common = ["-c", str(args.ctx_size), "-t", str(args.threads)]
    commands = {
        f"edgespec {d}": [
            *(sys.executable, "-m", "edgespec", "serve", "--target", target, "--draft", draft),
            *("--drafter", d, "--ctx-size", str(args.ctx_size), "--threads", str(args.threads)),
        ]
        for d in args.edgespec
    }
    for name in args.llama:
        extra = LLAMA_CONFIGS[name]
        model = ["-md", draft, "-td", str(args.threads)] if name.startswith(NEEDS_DRAFT) else []
        commands[f"llama-server {name}"] = [
            *(str(args.llama_bin / "llama-server"), "-m", target, *model, *common),
            *("--host", "127.0.0.1", "--parallel", "1", "--no-webui", *extra),
        ]
    return commands


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=60)
    p.add_argument("--seed", type=int, default=52)
    p.add_argument("--n-predict", type=int, default=64)
    p.add_argument("--prefix-lines", type=int, default=32)
    p.add_argument("--suffix-lines", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=4096)
    p.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    p.add_argument("--llama-bin", type=Path, help="the folder with llama-server")
    p.add_argument(
        "--llama",
        action="append",
        choices=sorted(LLAMA_CONFIGS),
        help="a llama-server configuration (repeatable; default: all)",
    )
    p.add_argument(
        "--edgespec", action="append", help="an edgespec drafter (repeatable; default none, auto)"
    )
    p.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="a server already running (repeatable); then none is started",
    )
    p.add_argument("--target", type=Path)
    p.add_argument("--draft", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    args = p.parse_args(argv)
    args.edgespec = args.edgespec or ["none", "auto"]
    if args.llama and args.llama_bin is None:
        p.error("--llama needs --llama-bin DIR (the folder with llama-server)")
    # Without llama-server, edgespec's configurations alone.
    args.llama = args.llama or (list(LLAMA_CONFIGS) if args.llama_bin else [])
    return args


def default_pair(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.target and args.draft:
        return args.target, args.draft
    from edgespec.models import files
    from edgespec.models.registry import load_registry

    ref = load_registry().default_pair
    return files.fetch(ref.target).path, files.fetch(ref.draft).path


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    spans = cut_spans(
        args.stdlib,
        args.spans,
        args.seed,
        prefix_lines=args.prefix_lines,
        suffix_lines=args.suffix_lines,
    )
    with ExitStack() as stack:
        if args.url:
            servers = dict(u.split("=", 1) for u in args.url)
            commands: dict[str, list[str]] = {}
        else:
            commands = server_commands(args, default_pair(args))
            servers = {}
            for name, cmd in commands.items():
                port = free_port()
                servers[name] = stack.enter_context(
                    started(name, [*cmd, "--port", str(port)], port)
                )
        for url in servers.values():  # the first request of a process pays its page faults
            post(url + "/infill", WARM_UP)
        runs = run_all(
            servers,
            spans,
            args.n_predict,
            lambda runs: write(args, report(args, commands or servers, spans, runs)),
        )
    doc = report(args, commands or servers, spans, runs)
    write(args, doc)
    print(markdown(doc))
    return doc


def report(
    args: argparse.Namespace,
    servers: dict[str, Any],
    spans: Sequence[Span],
    runs: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return {
        "command": " ".join(sys.argv),
        "machine": f"{platform.processor() or platform.machine()}, {args.threads} threads",
        "python": platform.python_version(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "servers": servers,
        "spans_run": f"{len(runs)} of {len(spans)}",
        "spans": [asdict(s) for s in spans],
        "runs": runs,
        "summary": summarise(runs, spans),
        "exact_match": {
            f"{a} vs {b}": exact_matches(runs, a, b)
            for a, b in [
                ("edgespec auto", "edgespec none"),
                ("llama-server plain", "edgespec none"),
                *((n, "llama-server plain") for n in servers if n.startswith("llama-server ")),
            ]
            if a in servers and b in servers and a != b
        },
    }


def write(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(doc))


if __name__ == "__main__":
    main()
