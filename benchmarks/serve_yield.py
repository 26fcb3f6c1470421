"""A short request beside a long answer on `edgespec serve`: what the short one waits, and what
the long one gives up.

Per drafter (`--drafters`, asked for per request, both requests alike) and run (`--runs`,
interleaved, every other one beside first): a 512-token chat answer alone, then a 16-token and
a 32-token request alone (their idle latency); and beside: the long answer streaming, the
16-token request sent once it has streamed `--after` tokens, the 32-token one when that has
ended. Every request is greedy and streamed, each from a new `user` (its caches and drafting
memory start empty, as a new client's do).

Reports per drafter, medians over the runs: each short request's latency alone and beside
(and their ratio); the long answer's tokens/s over its whole answer and over the interval the
short ones ran (the same tokens of its answer alone), alone and beside; and whether every
greedy text beside was its text alone.

    python benchmarks/serve_yield.py --start [--runs 5] [--drafters auto,none] [-- --parallel 2]
    python benchmarks/serve_yield.py --url http://127.0.0.1:8080   # a running server

`--start` runs `edgespec serve --parallel 2` (the default pair; more serve options after `--`)
and stops it at the end. Prints and writes one JSON report.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Beside this script (Python puts its folder first on the path).
from serve_load import _start, emit

LONG = ("Write a detailed guide to writing unit tests in Python, with examples.", 512)
SHORT = {
    "short_16": ("Name three primary colours, comma separated.", 16),
    "short_32": ("In two sentences, why is the sky blue?", 32),
}


@dataclass
class Answer:
    """One streamed answer: when it was sent, when each text chunk came, its text."""

    sent: float
    chunks: list[float] = field(default_factory=list)
    text: str = ""
    ended: float = 0.0

    @property
    def latency_s(self) -> float:
        return self.ended - self.sent


def ask(
    url: str, prompt: str, max_tokens: int, drafter: str, user: str, into: Answer | None = None
) -> Answer:
    """One greedy chat request, streamed (into `into`, which another thread may watch grow);
    raises on an error."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=900)
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "user": user,
        "edgespec": {"drafter": drafter},
    }
    answer = into or Answer(0.0)
    answer.sent = time.perf_counter()
    headers = {"Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:300]!r}")
    pieces = []
    try:
        while line := res.readline():
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            doc = json.loads(line[6:])
            if "error" in doc:
                raise RuntimeError(str(doc["error"]))
            for choice in doc.get("choices", []):
                text = choice.get("delta", {}).get("content")
                if text:  # a token each, but where UTF-8 needed two
                    answer.chunks.append(time.perf_counter())
                    pieces.append(text)
    finally:
        conn.close()
    answer.ended = time.perf_counter()
    answer.text = "".join(pieces)
    return answer


def rate(chunks: list[float], first: int, last: int) -> float | None:
    """Tokens (text chunks) per second from chunk `first` to chunk `last`."""
    if last <= first or last >= len(chunks) or chunks[last] <= chunks[first]:
        return None
    return (last - first) / (chunks[last] - chunks[first])


def beside(url: str, drafter: str, after: int, tag: str) -> dict[str, Any]:
    """The long answer streaming, the short requests one after the other beside it once it has
    streamed `after` tokens."""
    long = Answer(0.0)
    failed: list[BaseException] = []

    def long_answer() -> None:
        try:
            ask(url, *LONG, drafter, f"{tag}-long", into=long)
        except BaseException as exc:  # raised below, in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=long_answer)
    thread.start()
    while len(long.chunks) < after and thread.is_alive():
        time.sleep(0.005)
    shorts = {}
    start = time.perf_counter()
    for name, (prompt, n) in SHORT.items():
        shorts[name] = ask(url, prompt, n, drafter, f"{tag}-{name}")
    window = (start, time.perf_counter())
    thread.join()
    if failed:
        raise failed[0]
    return {"long": long, "window": window, **shorts}


def alone(url: str, drafter: str, tag: str) -> dict[str, Answer]:
    answers = {"long": ask(url, *LONG, drafter, f"{tag}-long")}
    for name, (prompt, n) in SHORT.items():
        answers[name] = ask(url, prompt, n, drafter, f"{tag}-{name}")
    return answers


def _median(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return round(statistics.median(seen), 4) if seen else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def run(url: str, drafters: list[str], runs: int, after: int) -> dict[str, Any]:
    """`runs` interleaved runs per drafter; the report (see the module's docstring)."""
    found: dict[str, list[dict[str, Any]]] = {d: [] for d in drafters}
    for i in range(runs):
        for drafter in drafters:
            tag = f"yield-{time.time_ns()}-{drafter}-{i}"
            got: dict[str, Any] = {}
            for what in ("alone", "beside") if i % 2 == 0 else ("beside", "alone"):
                if what == "alone":
                    got[what] = alone(url, drafter, f"{tag}-a")
                else:
                    got[what] = beside(url, drafter, after, f"{tag}-b")
            found[drafter].append(got)
    return {"runs": runs, "after": after, "drafters": {d: _summary(found[d]) for d in drafters}}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in SHORT:
        idle = [r["alone"][name].latency_s for r in runs]
        busy = [r["beside"][name].latency_s for r in runs]
        out[name] = {
            "latency_alone_s": _median(idle),
            "latency_beside_s": _median(busy),
            "ratio": _median([b / a for a, b in zip(idle, busy, strict=True)]),
        }
    whole_alone, whole_beside, window_alone, window_beside, overlapped = [], [], [], [], []
    for r in runs:
        solo, busy = r["alone"]["long"], r["beside"]["long"]
        whole_alone.append(rate(solo.chunks, 0, len(solo.chunks) - 1))
        whole_beside.append(rate(busy.chunks, 0, len(busy.chunks) - 1))
        start, end = r["beside"]["window"]
        inside = [i for i, t in enumerate(busy.chunks) if start <= t <= end]
        overlapped.append(bool(inside) and busy.ended > end)
        if inside:
            first, last = inside[0], inside[-1]
            window_beside.append(rate(busy.chunks, first, last))
            window_alone.append(rate(solo.chunks, first, last))
    out["long"] = {
        "tokens_per_s_alone": _median(whole_alone),
        "tokens_per_s_beside": _median(whole_beside),
        "ratio": _ratio(_median(whole_beside), _median(whole_alone)),
        "window_tokens_per_s_alone": _median(window_alone),
        "window_tokens_per_s_beside": _median(window_beside),
        "window_ratio": _ratio(_median(window_beside), _median(window_alone)),
        "runs_overlapped": sum(overlapped),
    }
    out["texts_differing"] = [
        {"run": i, "request": name, "alone": solo, "beside": busy}
        for i, r in enumerate(runs)
        for name in ("long", *SHORT)
        if (solo := r["alone"][name].text) != (busy := r["beside"][name].text)
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server with two slots or more (else --start)")
    parser.add_argument("--start", action="store_true", help="run `edgespec serve --parallel 2`")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--drafters", default="auto,none", help="comma-separated")
    parser.add_argument("--after", type=int, default=100, help="the long answer's tokens first")
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("serve_args", nargs="*", help="after --: more `edgespec serve` options")
    args = parser.parse_args()
    if args.start == bool(args.url):
        parser.error("give --start or --url")
    proc = None
    url = args.url
    if args.start:
        slots = [] if "--parallel" in args.serve_args else ["--parallel", "2"]
        proc, url = _start([*slots, *args.serve_args])
    try:
        report = run(url, args.drafters.split(","), args.runs, args.after)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(120)
    report["serve_args"] = args.serve_args
    emit(report, args.out)


if __name__ == "__main__":
    main()
