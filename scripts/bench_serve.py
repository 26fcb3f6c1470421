"""What the server costs: the same prompts through `edgespec serve`'s HTTP streaming and
directly through the Python API (what `edgespec run` does), in one process, interleaved.

    python scripts/bench_serve.py [--repeats 5] [--max-tokens 64] [--drafter none]

Reports per prompt the time per generated token and the time to the first token both ways,
and the medians of the overhead (goals: <= 3 % of decode time per token, <= 20 ms TTFT).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
import urllib.request

import uvicorn

from edgespec.api import DecodeOptions, Speculator, TokenEvent, make_plan
from edgespec.server.app import create_app

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash table is in three sentences.",
    "Rename the variable x to total:\n\nx = 0\nfor v in values:\n    x += v\nprint(x)\n",
]


def direct(spec: Speculator, prompt: str, args: argparse.Namespace) -> tuple[float, float, int]:
    start = time.perf_counter()
    first, n = 0.0, 0
    for event in spec.stream(prompt, drafter=args.drafter, max_tokens=args.max_tokens):
        if isinstance(event, TokenEvent):
            n += 1
            first = first or time.perf_counter() - start
    return first, time.perf_counter() - start, n


def served(url: str, prompt: str, args: argparse.Namespace) -> tuple[float, float, int]:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "edgespec": {"drafter": args.drafter},
    }
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    first, n = 0.0, 0
    with urllib.request.urlopen(request) as res:
        for line in res:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = first or time.perf_counter() - start
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    return first, time.perf_counter() - start, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="none")
    args = parser.parse_args()

    spec = Speculator.load(plan=make_plan(DecodeOptions(drafter="auto", keep_draft=True)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(spec, model_names=["edgespec"])
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"

    rows, per_token, ttft = [], [], []
    for prompt in PROMPTS:
        served(url, prompt, args)  # warm-up, and both ways start from the same cached prompt
        d_runs, s_runs = [], []
        for _ in range(args.repeats):  # interleaved
            d_runs.append(direct(spec, prompt, args))
            s_runs.append(served(url, prompt, args))
        d_tok = statistics.median(t / n for _, t, n in d_runs)
        s_tok = statistics.median(t / n for _, t, n in s_runs)
        d_first = statistics.median(f for f, _, _ in d_runs)
        s_first = statistics.median(f for f, _, _ in s_runs)
        per_token.append(s_tok / d_tok - 1)
        ttft.append(s_first - d_first)
        rows.append((prompt[:40], d_tok * 1000, s_tok * 1000, d_first * 1000, s_first * 1000))
    print("| prompt | ms/token direct | ms/token served | TTFT direct ms | TTFT served ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]!r} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.1f} | {r[4]:.1f} |")
    print(
        f"\nserver overhead per token: median {statistics.median(per_token):+.2%} "
        f"(goal <= 3 %); TTFT overhead: median {statistics.median(ttft) * 1000:+.1f} ms "
        f"(goal <= 20 ms); {args.repeats} runs each, drafter {args.drafter}, "
        f"{args.max_tokens} tokens"
    )
    server.should_exit = True


if __name__ == "__main__":
    main()
