"""The target on two loopback RPC servers behind the delay proxy: plain decoding against `auto`
at several added round-trip latencies, and the same on this machine alone.

    .venv/bin/python scripts/bench_rpc.py [--rtt-ms 0,2,10] [--suite code_editing ...]
        [--prompts N] [--repeats 3] [--max-tokens 128] [--threads 2] [--out benchmarks/rpc/rpc.json]

Each link is one `edgespec bench --configs none,auto` run (interleaved, medians, lossless
check) plus `edgespec plan --json` for what auto chose there; the servers and proxies are
started and stopped here. Prints a markdown table; writes every number to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EDGESPEC = [sys.executable, "-m", "edgespec"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(stack: ExitStack, argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    proc = subprocess.Popen(argv, text=True, **kwargs)
    stack.callback(proc.wait)
    stack.callback(proc.kill)
    return proc


def servers(stack: ExitStack, binary: str, threads: int) -> list[str]:
    endpoints = []
    for _ in range(2):
        port = free_port()
        start(
            stack,
            [binary, "-H", "127.0.0.1", "-p", str(port), "-t", str(threads)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        endpoints.append(f"127.0.0.1:{port}")
    for endpoint in endpoints:
        host, number = endpoint.split(":")
        for _ in range(300):
            try:
                socket.create_connection((host, int(number)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
    return endpoints


def proxies(stack: ExitStack, endpoints: list[str], rtt_ms: float) -> str:
    relay = [sys.executable, str(ROOT / "scripts" / "delay_proxy.py"), "--rtt-ms", str(rtt_ms)]
    procs = [start(stack, [*relay, e], stdout=subprocess.PIPE) for e in endpoints]
    ports = [p.stdout.readline().split()[1] for p in procs if p.stdout is not None]
    return ",".join(f"127.0.0.1:{port}" for port in ports)


def run_link(rpc: str | None, args: argparse.Namespace) -> dict[str, Any]:
    link = ["--rpc", rpc] if rpc else []
    plan = subprocess.run(
        [*EDGESPEC, "plan", "--json", *link], capture_output=True, text=True, check=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        suites = [x for s in suite_files(args, Path(tmp)) for x in ("--suite", s)]
        subprocess.run(
            [*EDGESPEC, "bench", "--configs", "none,auto", *suites, *link,
             "--repeats", str(args.repeats), "--max-tokens", str(args.max_tokens),
             "--json", str(out)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        bench = json.loads(out.read_text())
    return {"plan": json.loads(plan.stdout), "bench": bench}


def suite_files(args: argparse.Namespace, folder: Path) -> list[str]:
    """The suites as given, or their first --prompts prompts (as files of the same names)."""
    if not args.prompts:
        return list(args.suite)
    paths = []
    for name in args.suite:
        lines = (ROOT / "edgespec" / "bench" / "prompts" / f"{name}.jsonl").read_text().splitlines()
        path = folder / f"{name}.jsonl"
        path.write_text("\n".join(lines[: args.prompts]) + "\n")
        paths.append(str(path))
    return paths


def summary(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per suite: plain and auto tok/s (mean over prompts of medians) and auto's speedup."""
    rows: dict[str, dict[str, Any]] = {}
    for suite in {p["suite"] for p in result["bench"]["prompts"]}:
        prompts = [p for p in result["bench"]["prompts"] if p["suite"] == suite]
        plain = [p["median_tokens_per_s"]["none"] for p in prompts]
        auto = [p["median_tokens_per_s"]["auto"] for p in prompts]
        ratios = [p["speedup"]["auto"] for p in prompts]
        rows[suite] = {
            "plain_tok_s": sum(plain) / len(plain),
            "auto_tok_s": sum(auto) / len(auto),
            "speedup": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "min_ratio": min(ratios),
        }
    return rows


def chose(plan: dict[str, Any]) -> str:
    d = plan["decision"]
    model = f", model K={d['model_k']}" if "model" in d["drafters"] else ""
    return f"{' + '.join(d['drafters'])} (n-gram K={d['ngram_k_at_high_acceptance']}{model})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", default="0,2,10")
    parser.add_argument("--suite", action="append", default=None)
    parser.add_argument("--prompts", type=int, default=0, help="the first N of each suite")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="threads of each RPC server")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.suite = args.suite or ["code_editing", "code_generation"]
    binary = subprocess.run(
        ["sh", str(ROOT / "scripts" / "build_rpc_server.sh")],
        capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    results: dict[str, Any] = {"local": run_link(None, args)}
    for rtt in [float(x) for x in args.rtt_ms.split(",")]:
        with ExitStack() as stack:
            rpc = proxies(stack, servers(stack, binary, args.threads), rtt)
            results[f"{rtt:g} ms"] = run_link(rpc, args)
        print(f"done: {rtt:g} ms", file=sys.stderr)
    print("| link | suite | plain tok/s | auto tok/s | auto / plain | min | auto chose |")
    print("|---|---|---|---|---|---|---|")
    for link, result in results.items():
        for suite, row in sorted(summary(result).items()):
            print(
                f"| {link} | {suite} | {row['plain_tok_s']:.1f} | {row['auto_tok_s']:.1f} | "
                f"{row['speedup']:.2f}x | {row['min_ratio']:.2f}x | {chose(result['plan'])} |"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
