"""The medians of the three rounds in this folder (run.sh), as the README's tables.

python benchmarks/serve/several/medians/medians.py [FOLDER]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def runs(folder: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob(f"{name}-r*.json"))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    print("| drafter | editor p95, idle (s) | beside a chat answer (s) | ratio | chat tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for d in ("auto", "none"):
        idle = [
            r["classes"]["editor"]["latency_s"]["p95"] for r in runs(folder, f"mixed-idle-p2-{d}")
        ]
        busy = runs(folder, f"mixed-chat-p2-{d}")
        p95 = [r["classes"]["editor"]["latency_s"]["p95"] for r in busy]
        chat = [r["classes"]["chat"]["tokens_per_s"] for r in busy]
        ratios = [b / i for b, i in zip(p95, idle, strict=True)]
        print(
            f"| {d} | {median(idle):.2f} ({', '.join(f'{x:.2f}' for x in idle)}) "
            f"| {median(p95):.2f} ({', '.join(f'{x:.2f}' for x in p95)}) "
            f"| {median(ratios):.2f} | {median(chat):.1f} |"
        )
    print()
    print("| drafter | clients | tok/s (runs) | against 1 client | acceptance |")
    print("| --- | --- | --- | --- | --- |")
    for d in ("none", "auto"):
        one = median(
            [r["classes"]["throughput"]["tokens_per_s"] for r in runs(folder, f"tput-c1-p1-{d}")]
        )
        for n in (1, 2, 4):
            got = runs(folder, f"tput-c{n}-p{n}-{d}")
            tps = [r["classes"]["throughput"]["tokens_per_s"] for r in got]
            acc = [r["classes"]["throughput"]["acceptance"] for r in got]
            shown = "-" if None in acc else f"{median(acc):.2f}"
            print(
                f"| {d} | {n} | {median(tps):.1f} ({', '.join(f'{x:.1f}' for x in tps)}) "
                f"| {median(tps) / one:.2f} | {shown} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
