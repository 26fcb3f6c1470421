"""The `soak` workload of `serve_load.py`: `--clients` clients (4: one a slot of `--parallel
4`) that each mix every endpoint, streamed and not, greedy: chat, text completions,
text completions with `suffix`, llama.cpp's `/infill`. Every request names its own `user`, so
that the clients' caches and drafts stay apart. At the end each distinct request is sent once
more to the idle server: every answer under load must be that answer's text, and a request that
failed under load is counted against the server where the idle server answers it.

    python benchmarks/serve_load.py --start --workload soak --clients 4 --duration 600 \
        -- --parallel 4
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CHATS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash table is, in three sentences.",
    "Add type hints:\n\ndef scale(xs, k):\n    return [x * k for x in xs]\n",
]
CODE = [
    ("def fibonacci(n):\n    ", "\n\nprint(fibonacci(10))\n"),
    ("class Stack:\n    def __init__(self):\n        ", "\n\n    def push(self, x):\n"),
    ("import json\n\n\ndef load_config(path):\n    ", "\n\nconfig = load_config('a.json')\n"),
]
ENDPOINTS = ("chat", "completion", "suffix", "infill")
MAX_TOKENS = 48


@dataclass(frozen=True)
class Ask:
    """One request, which the idle server answers with one text."""

    endpoint: str  # one of ENDPOINTS
    prompt: int  # which of CHATS (chat) or CODE (the others)

    def path(self) -> str:
        return {"chat": "/v1/chat/completions", "infill": "/infill"}.get(
            self.endpoint, "/v1/completions"
        )

    def body(self, stream: bool, user: str) -> dict[str, Any]:
        common = {"temperature": 0, "stream": stream, "user": user}
        if self.endpoint == "chat":
            message = {"role": "user", "content": CHATS[self.prompt]}
            return {**common, "messages": [message], "max_tokens": MAX_TOKENS}
        before, after = CODE[self.prompt]
        if self.endpoint == "infill":
            return {
                **common,
                "input_prefix": before,
                "input_suffix": after,
                "n_predict": MAX_TOKENS,
            }
        suffix = {"suffix": after} if self.endpoint == "suffix" else {}
        return {**common, "prompt": before, "max_tokens": MAX_TOKENS, **suffix}


@dataclass
class Outcome:
    ask: Ask
    stream: bool
    user: str
    text: str | None  # None: it failed
    error: str | None = None
    latency_s: float = 0.0


@dataclass
class Results:
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)


def send(url: str, ask: Ask, stream: bool, user: str) -> Outcome:
    """One request and the text of its answer (whole, or put together from its events)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=900)
    start = time.perf_counter()
    try:
        body = json.dumps(ask.body(stream, user))
        conn.request("POST", ask.path(), body, {"Content-Type": "application/json"})
        res = conn.getresponse()
        data = res.read()
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(ask, stream, user, None, f"connection: {type(exc).__name__}")
    finally:
        conn.close()
    latency = time.perf_counter() - start
    if res.status != 200:
        return Outcome(ask, stream, user, None, f"http_{res.status}", latency)
    try:
        text = _streamed(ask, data) if stream else _whole(ask, json.loads(data))
    except (ValueError, KeyError) as exc:
        return Outcome(ask, stream, user, None, f"answer: {str(exc)[:120]}", latency)
    return Outcome(ask, stream, user, text, None, latency)


def _whole(ask: Ask, doc: dict[str, Any]) -> str:
    if ask.endpoint == "infill":
        return str(doc["content"])
    choice = doc["choices"][0]
    return str(choice["message"]["content"] if ask.endpoint == "chat" else choice["text"])


def _streamed(ask: Ask, data: bytes) -> str:
    parts = []
    for line in data.decode().split("\n\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        doc = json.loads(line[6:])
        if "error" in doc:
            raise ValueError(f"error event: {doc['error']}")
        if ask.endpoint == "infill":
            parts.append(doc["content"])
        for choice in doc.get("choices", []):
            parts.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(parts)


def client(url: str, number: int, deadline: float, seed: int, results: Results) -> None:
    """Every endpoint, streamed and not, in a shuffled round, until the deadline."""
    rng = random.Random(seed * 1000 + number)
    user = f"soak-{number}"
    while time.monotonic() < deadline:
        round_ = [(e, s) for e in ENDPOINTS for s in (False, True)]
        rng.shuffle(round_)
        for endpoint, stream in round_:
            if time.monotonic() >= deadline:
                return
            count = len(CHATS) if endpoint == "chat" else len(CODE)
            results.add(send(url, Ask(endpoint, rng.randrange(count)), stream, user))


def run(url: str, clients: int, duration: float, seed: int) -> dict[str, Any]:
    """The soak for `duration` seconds, then every distinct request once more, alone."""
    results = Results()
    start = time.monotonic()
    deadline = start + duration
    threads = [
        threading.Thread(target=client, args=(url, n, deadline, seed, results))
        for n in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    outcomes = results.outcomes
    asks = sorted({o.ask for o in outcomes}, key=repr)
    idle = {ask: send(url, ask, False, "soak-idle") for ask in asks}
    differing = [o for o in outcomes if o.text is not None and o.text != idle[o.ask].text]
    # A request that failed under load, whose idle twin is answered: the server's fault.
    failed = [o for o in outcomes if o.text is None and idle[o.ask].text is not None]
    served = [o for o in outcomes if o.text is not None]
    latency = sorted(o.latency_s for o in served)
    return {
        "workload": "soak",
        "clients": clients,
        "duration_s": duration,
        "wall_s": round(wall, 1),
        "requests": len(outcomes),
        "served": len(served),
        "served_by_endpoint": dict(
            Counter(f"{o.ask.endpoint}{'_stream' if o.stream else ''}" for o in served)
        ),
        "latency_s": {
            "p50": round(latency[len(latency) // 2], 3) if latency else None,
            "max": round(latency[-1], 3) if latency else None,
        },
        "idle_failures": sorted({f"{a.endpoint}: {o.error}" for a, o in idle.items() if o.error}),
        "failed_where_idle_answers": len(failed),
        "failure_examples": [f"{o.ask.endpoint} stream={o.stream}: {o.error}" for o in failed[:5]],
        "differing_from_idle": len(differing),
        "differing_examples": [
            {
                "endpoint": o.ask.endpoint,
                "stream": o.stream,
                "under_load": o.text,
                "idle": idle[o.ask].text,
            }
            for o in differing[:5]
        ],
    }
