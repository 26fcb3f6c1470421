"""How `edgespec serve` holds up under load and faults, for a bounded time.

The `faults` workload (the default): N concurrent clients mixing streamed and whole answers,
clients that leave at a random point, readers that stall, bad requests, and hostile ones
(serve_clients.py): schemas that cost the grammar compiler (10,000 optional properties; a chain
of 2,000 `$ref`s), a new `user` per request, prompts that ask for a call to an undeclared tool,
stop strings that would cut a JSON schema's answer. Then every greedy answer is compared with
the same request served alone. Violations and 5xx answers are counted as errors.

    python benchmarks/serve_load.py --start [--clients 16] [--duration 120] [--out FILE]
    python benchmarks/serve_load.py --url http://127.0.0.1:8080 --pid PID   # a running server

Several clients at once (serve_mixed.py): `--workload mixed [--chat N]`, an editor-like
client's short completions (some cancelled) while N chat clients stream long answers, per class
p50/p95 latency and time to first token, tokens/s and acceptance; `--workload throughput
--clients N`, N clients' whole answers, the total tokens/s:

    python benchmarks/serve_load.py --start --workload mixed --chat 1 -- --parallel 2

Every endpoint, greedy, against its idle answer (serve_soak.py): `--workload soak --clients 4`,
each client mixing chat, text completions with and without `suffix` and `/infill`, streamed and
not; every answer must be its idle text, and no request may fail that the idle server answers:

    python benchmarks/serve_load.py --start --workload soak --clients 4 --duration 600 \
        -- --parallel 4

`--start` runs `edgespec serve` (the default pair; more serve options after `--`) and stops it
at the end. Prints and writes one JSON report: requests served, p50/p95 latency and time to
first token, errors by type, the server's RSS at start, end and peak, and the answers that
differed from their request served alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

# Beside this script (Python puts its folder first on the path).
import serve_mixed
import serve_soak
from serve_clients import MAX_TOKENS, Outcome, Run, client, greedy_body, post


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def alone(run: Run, key: tuple[int, int]) -> str:
    conn, res = post(run, greedy_body(key, False))
    doc = json.loads(res.read())
    conn.close()
    assert res.status == 200, doc
    return str(doc["choices"][0]["message"]["content"])


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p95": round(p95, 3)}


def load(
    url: str, pid: int, clients: int, duration: float, seed: int, stall_s: float = 40.0
) -> dict[str, Any]:
    """Drive the server at `url` (process `pid`) and report."""
    parts = urllib.parse.urlsplit(url)
    run = Run(parts.hostname or "127.0.0.1", parts.port or 80, 0.0, seed, stall_s)
    load_before = os.getloadavg()[0]
    rss_loaded = rss_mb(pid)
    alone(run, (0, MAX_TOKENS[0]))  # the weights' pages read in: RSS from here on is the server's
    rss_start = rss_mb(pid)
    peak = [rss_start]
    warm: float | None = None  # RSS once warmed up: a fifth of the run in, at most a minute
    began = time.monotonic()
    run.deadline = began + duration
    threads = [threading.Thread(target=client, args=(run, n)) for n in range(clients)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        peak.append(rss_mb(pid))
        if warm is None and time.monotonic() - began >= min(60.0, duration / 5):
            warm = peak[-1]
        time.sleep(1.0)
    wall = time.monotonic() - began
    load_after = os.getloadavg()[0]
    rss_end = rss_mb(pid)
    served = [o for o in run.outcomes if o.text is not None]
    # Each distinct greedy request once more, alone, and every answer compared with it.
    expected = {key: alone(run, key) for key in sorted({o.key for o in served if o.key})}
    differing = [o for o in served if o.key and o.text != expected[o.key]]
    errors = [o.error for o in run.outcomes if o.error]
    violations = [o for o in run.outcomes if (o.error or "").startswith("violation_")]
    return {
        "clients": clients,
        "duration_s": duration,
        "wall_s": round(wall, 1),
        "requests": len(run.outcomes),
        "served": len(served),
        "requests_by_kind": dict(Counter(o.kind for o in run.outcomes)),
        "served_by_kind": dict(Counter(o.kind for o in served)),
        "tokens_asked_served": sum(o.key[1] for o in served if o.key),
        "latency_s": _quantiles([o.latency_s for o in served if o.latency_s is not None]),
        "ttft_s": _quantiles([o.ttft_s for o in served if o.ttft_s is not None]),
        "outcomes_not_served": dict(Counter(errors)),
        # 5xx answers (whole, streamed, or to a request that expected a 4xx) and violations.
        "server_errors": sum(1 for e in errors if re.search(r"(http_|_got_)5\d\d|server_error", e)),
        "violations": len(violations),
        "violation_examples": [{"error": o.error, "answer": o.detail} for o in violations[:5]],
        "rss_mb": {
            "loaded": round(rss_loaded, 1),
            "start": round(rss_start, 1),
            "after_warmup": round(warm if warm is not None else rss_end, 1),
            "end": round(rss_mb(pid), 1),
            "end_of_load": round(rss_end, 1),
            "peak": round(max(peak), 1),
        },
        # Other work on the machine slows the server: the 1-minute load average around the run.
        "loadavg_1min": {"start": load_before, "end": load_after},
        "greedy_checked": len([o for o in served if o.key]),
        "greedy_distinct_requests": len(expected),
        "greedy_differing": [_difference(o, expected[o.key]) for o in differing if o.key],
    }


def _difference(outcome: Outcome, alone: str) -> dict[str, Any]:
    """Where an answer under load left the same request's answer alone, with both texts."""
    text = outcome.text or ""
    pairs = enumerate(zip(text, alone, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(text), len(alone)))
    return {
        "prompt": outcome.key[0] if outcome.key else None,
        "max_tokens": outcome.key[1] if outcome.key else None,
        "kind": outcome.kind,
        "first_different_char": at,
        "under_load": text,
        "alone": alone,
    }


def _start(extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cmd = [sys.executable, "-m", "edgespec", "serve", "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"edgespec serve exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.5)


def _several(url: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    report = serve_mixed.run(
        url, args.workload, args.clients, args.chat, args.duration, args.seed, args.max_tokens
    )
    return {**report, "serve_args": args.serve_args, "rss_mb": rss_mb(pid)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (else --start)")
    parser.add_argument("--pid", type=int, help="the running server's process, for its RSS")
    parser.add_argument("--start", action="store_true", help="run `edgespec serve` for this")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stall", type=float, default=40.0, help="longest stall, seconds")
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument(
        "--workload", choices=["faults", "mixed", "throughput", "soak"], default="faults"
    )
    parser.add_argument("--chat", type=int, default=1, help="mixed: chat clients")
    parser.add_argument("--max-tokens", type=int, default=128, help="throughput: per answer")
    parser.add_argument("serve_args", nargs="*", help="after --: more `edgespec serve` options")
    args = parser.parse_args()
    if args.start == bool(args.url):
        parser.error("give --start or --url (with --pid)")
    proc = None
    if args.start:
        proc, url = _start(args.serve_args)
        pid = proc.pid
    else:
        url, pid = args.url, args.pid
        if pid is None:
            parser.error("--url needs --pid (the server's process, for its RSS)")
    try:
        if args.workload == "faults":
            report = load(url, pid, args.clients, args.duration, args.seed, args.stall)
        elif args.workload == "soak":
            report = serve_soak.run(url, args.clients, args.duration, args.seed)
            report = {**report, "serve_args": args.serve_args, "rss_mb": rss_mb(pid)}
        else:
            report = _several(url, pid, args)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(120)
    emit(report, args.out)


def emit(report: dict[str, Any], out: Path | None) -> None:
    """Print the report as JSON, and write it to `out` as well where one is given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
