"""The workloads of `serve_load.py --workload` for several clients at once.

- `mixed`: an editor-like client sends short completions (32 tokens, streamed) with a pause
  after each, and now and then cancels one a moment after sending it (the user typed on);
  `--chat` chat clients stream long answers (512 tokens) one after another. Per class: p50/p95
  latency and time to first token, tokens/s, and speculation's acceptance. `--chat 0` is the
  editor on an idle server.
- `throughput`: `--clients` clients each ask for answers (`--max-tokens`, streamed) one after
  another; the total tokens/s streamed in the window, and the acceptance of those completed.

At the end of `--duration` every request still running is cancelled (its client leaves): a
chat answer need not end for the editor's completions beside it to be measured, and on a slow
machine a run keeps to its time. Cancelled requests count apart (their streamed tokens count
in tokens/s).
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from functools import partial
from typing import Any

EDITOR = [
    "def fibonacci(n):\n    ",
    "class Stack:\n    def __init__(self):\n        ",
    "import json\n\n\ndef load_config(path):\n    ",
    "for i in range(10):\n    ",
    "def is_palindrome(text):\n    ",
    "# Sort the list of users by age\nusers.sort(",
]
CHAT = [
    "Write a detailed guide to writing unit tests in Python, with examples.",
    "Explain how a CPU cache works, step by step, in detail.",
    "Write a long story about a lighthouse keeper and a storm.",
    "Describe the history of the printing press in detail.",
]
THROUGHPUT = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash table is.",
    "List ten fruits and say one thing about each.",
    "Write a short poem about the sea.",
]


@dataclass
class Answer:
    kind: str  # "editor", "chat", "throughput"
    latency_s: float
    ttft_s: float | None
    tokens: int
    drafted: int
    accepted: int
    cancelled: bool = False


@dataclass
class Results:
    answers: list[Answer] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=900)


def stream(
    url: str, path: str, doc: dict[str, Any], kind: str, cancel: threading.Event | None = None
) -> Answer:
    """One streamed request; `cancel` set while it runs closes the connection (the client left)."""
    conn = _connection(url)
    start = time.perf_counter()
    conn.request(
        "POST", path, json.dumps({**doc, "stream": True}), {"Content-Type": "application/json"}
    )
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"{kind}: HTTP {res.status} {res.read()[:200]!r}")
    first, tokens, chunks, block = None, 0, 0, {}
    try:
        while line := res.readline():
            if cancel is not None and cancel.is_set():
                return Answer(kind, time.perf_counter() - start, first, chunks, 0, 0, True)
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            doc_ = json.loads(line[6:])
            if "error" in doc_:
                raise RuntimeError(f"{kind}: {doc_['error']}")
            for choice in doc_.get("choices", []):
                text = choice.get("text") or choice.get("delta", {}).get("content")
                if text:
                    chunks += 1  # a token each, but where UTF-8 needed two
                    first = first if first is not None else time.perf_counter() - start
            if "usage" in doc_ and doc_.get("choices"):
                tokens = doc_["usage"]["completion_tokens"]
                block = doc_.get("edgespec", {})
    finally:
        conn.close()
    latency = time.perf_counter() - start
    return Answer(kind, latency, first, tokens, block.get("drafted", 0), block.get("accepted", 0))


def _cancelled_at(deadline: float, early: float | None = None) -> threading.Event:
    """An event set at the deadline (or `early` seconds from now)."""
    cancel = threading.Event()
    delay = deadline - time.monotonic() if early is None else early
    timer = threading.Timer(max(0.0, delay), cancel.set)
    timer.daemon = True
    timer.start()
    return cancel


def editor(url: str, deadline: float, rng: random.Random, results: Results) -> None:
    """Short completions, a pause after each; one in four cancelled 0.3 s after it was sent."""
    while time.monotonic() < deadline:
        doc = {"prompt": rng.choice(EDITOR), "max_tokens": 32, "temperature": 0}
        early = 0.3 if rng.random() < 0.25 else None
        cancel = _cancelled_at(deadline, early)
        try:
            results.add(stream(url, "/v1/completions", doc, "editor", cancel))
        except Exception as exc:  # counted, the run goes on
            results.errors.append(str(exc)[:200])
        time.sleep(rng.uniform(0.5, 1.5))


def chat(url: str, deadline: float, rng: random.Random, results: Results) -> None:
    while time.monotonic() < deadline:
        message = {"role": "user", "content": rng.choice(CHAT)}
        doc = {"messages": [message], "max_tokens": 512, "temperature": 0}
        try:
            results.add(stream(url, "/v1/chat/completions", doc, "chat", _cancelled_at(deadline)))
        except Exception as exc:
            results.errors.append(str(exc)[:200])


def throughput_client(
    url: str, deadline: float, rng: random.Random, results: Results, max_tokens: int = 128
) -> None:
    while time.monotonic() < deadline:
        message = {"role": "user", "content": rng.choice(THROUGHPUT)}
        doc = {"messages": [message], "max_tokens": max_tokens, "temperature": 0}
        try:
            results.add(
                stream(url, "/v1/chat/completions", doc, "throughput", _cancelled_at(deadline))
            )
        except Exception as exc:
            results.errors.append(str(exc)[:200])


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1], 3)


def summary(answers: list[Answer], seconds: float) -> dict[str, Any]:
    done = [a for a in answers if not a.cancelled]
    drafted = sum(a.drafted for a in done)
    latency = [a.latency_s for a in done]
    ttft = [a.ttft_s for a in done if a.ttft_s is not None]
    # A stream's own rate: its tokens after the first, over the time after the first.
    rates = [
        (a.tokens - 1) / (a.latency_s - a.ttft_s)
        for a in done
        if a.ttft_s is not None and a.tokens > 1 and a.latency_s > a.ttft_s
    ]
    return {
        "requests": len(answers),
        "completed": len(done),
        "cancelled": len(answers) - len(done),
        "latency_s": {"p50": _quantile(latency, 0.5), "p95": _quantile(latency, 0.95)},
        "ttft_s": {"p50": _quantile(ttft, 0.5), "p95": _quantile(ttft, 0.95)},
        "stream_tokens_per_s": {"p50": _quantile(rates, 0.5)},
        "tokens": sum(a.tokens for a in done),
        # Every streamed token in the window, the cancelled requests' too.
        "tokens_per_s": round(sum(a.tokens for a in answers) / seconds, 3),
        "acceptance": round(sum(a.accepted for a in done) / drafted, 4) if drafted else None,
        "drafted": drafted,
    }


def run(
    url: str,
    workload: str,
    clients: int,
    chats: int,
    duration: float,
    seed: int,
    max_tokens: int = 128,
) -> dict[str, Any]:
    """The workload for `duration` seconds; what still runs then is cancelled."""
    results = Results()
    start = time.monotonic()
    deadline = start + duration
    if workload == "mixed":
        jobs = [(editor, 0)] + [(chat, 1 + i) for i in range(chats)]
    else:
        jobs = [(partial(throughput_client, max_tokens=max_tokens), i) for i in range(clients)]
    threads = [
        threading.Thread(target=fn, args=(url, deadline, random.Random(seed * 1000 + i), results))
        for fn, i in jobs
    ]
    for t in threads:
        t.start()
        time.sleep(0.2)  # staggered, as clients arrive
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    kinds = sorted({a.kind for a in results.answers})
    return {
        "workload": workload,
        "clients": clients if workload != "mixed" else 1 + chats,
        "chat_clients": chats if workload == "mixed" else None,
        "duration_s": round(seconds, 1),
        "classes": {
            k: summary([a for a in results.answers if a.kind == k], seconds) for k in kinds
        },
        "errors": results.errors,
    }
