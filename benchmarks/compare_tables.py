"""compare_llamacpp.py's statistics and tables: per prompt the best of llama.cpp's
configurations against edgespec's `auto` and plain decoding, per suite their geometric means.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

LLAMA_PLAIN = "llama.cpp plain"  # its own decoding without a draft, for prompts with a schema
PLAIN_RATIOS = ("best_llama_over_llama_plain", "auto_over_llama_plain", "plain_over_llama_plain")


def heldout_best(llama: dict[str, list[float]]) -> float | None:
    """llama.cpp's best configuration chosen on the other repeats (median tok/s) and timed on
    the one left out, averaged over the repeats (None with one repeat): as `edgespec bench`
    judges its best fixed configuration."""
    repeats = min(len(v) for v in llama.values())
    if repeats < 2:
        return None
    picks = []
    for r in range(repeats):
        others = {n: statistics.median([*v[:r], *v[r + 1 : repeats]]) for n, v in llama.items()}
        picks.append(llama[max(others, key=others.__getitem__)][r])
    return statistics.mean(picks)


def summarise(runs: dict[str, list[dict[str, Any]]], greedy: bool = True) -> dict[str, Any]:
    median = {name: statistics.median(r["tok_s"] for r in rs) for name, rs in runs.items()}
    llama = {n: v for n, v in median.items() if not n.startswith("edgespec") and n != LLAMA_PLAIN}
    best = max(llama, key=llama.__getitem__)
    auto, plain = median["edgespec auto"], median["edgespec plain"]
    # Sampled texts differ from run to run: only greedy ones are compared.
    same = greedy and all(
        r["out"] == runs["edgespec plain"][0]["out"] for r in runs["edgespec auto"]
    )
    held = heldout_best({n: [r["tok_s"] for r in runs[n]] for n in llama})
    return {
        "median_tok_s": median,
        "best_llama": best,
        "best_llama_tok_s": llama[best],
        "heldout_best_llama_tok_s": held,
        "auto_tok_s": auto,
        "plain_tok_s": plain,
        "auto_over_best_llama": auto / llama[best],
        "auto_over_heldout_best_llama": auto / held if held else None,
        "auto_over_plain": auto / plain,
        "best_llama_over_plain": llama[best] / plain,
        "auto_text_equals_plain": same,
    } | _against_llama_plain(median)


def _against_llama_plain(median: dict[str, float]) -> dict[str, float]:
    """With a schema: llama.cpp's plain constrained decoding against its best speculation and
    against edgespec's auto and plain decoding."""
    if LLAMA_PLAIN not in median:
        return {}
    plain = median[LLAMA_PLAIN]
    best = max(v for n, v in median.items() if not n.startswith("edgespec") and n != LLAMA_PLAIN)
    return {
        "llama_plain_tok_s": plain,
        "best_llama_over_llama_plain": best / plain,
        "auto_over_llama_plain": median["edgespec auto"] / plain,
        "plain_over_llama_plain": median["edgespec plain"] / plain,
    }


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "| suite | prompt | best llama.cpp | its tok/s | auto tok/s | auto / best | "
        "auto / plain | best llama.cpp / plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for suite, prompts in doc["suites"].items():
        for p in prompts:
            s = p["summary"]
            lines.append(
                f"| {suite} | {p['name']} | {s['best_llama']} | {s['best_llama_tok_s']:.1f} | "
                f"{s['auto_tok_s']:.1f} | {s['auto_over_best_llama']:.2f}x | "
                f"{s['auto_over_plain']:.2f}x | {s['best_llama_over_plain']:.2f}x |"
            )
    lines += [
        "",
        "| suite | auto / best llama.cpp (geo-mean, min-max) | auto / best, chosen on other "
        "runs | auto / plain | best llama.cpp / plain |",
        "|---|---|---|---|---|",
    ]
    for suite, g in doc["geomeans"].items():
        held = g["auto_over_heldout_best_llama"]
        lines.append(
            f"| {suite} | {g['auto_over_best_llama']:.2f}x ({g['min']:.2f}-{g['max']:.2f}) | "
            f"{'-' if held is None else f'{held:.2f}x'} | "
            f"{g['auto_over_plain']:.2f}x | {g['best_llama_over_plain']:.2f}x |"
        )
    constrained = {suite: g for suite, g in doc["geomeans"].items() if PLAIN_RATIOS[0] in g}
    if constrained:
        lines += [
            "",
            "| suite (under its JSON schemas) | best llama.cpp / llama.cpp plain | "
            "auto / llama.cpp plain | edgespec plain / llama.cpp plain |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {suite} | " + " | ".join(f"{g[key]:.2f}x" for key in PLAIN_RATIOS) + " |"
            for suite, g in constrained.items()
        ]
    wins: dict[str, int] = {}
    for prompts in doc["suites"].values():
        for p in prompts:
            wins[p["summary"]["best_llama"]] = wins.get(p["summary"]["best_llama"], 0) + 1
    lines += [
        "",
        "llama.cpp's best configuration, prompts won: "
        + ", ".join(f"{name} {n}" for name, n in sorted(wins.items(), key=lambda kv: -kv[1])),
    ]
    return "\n".join(lines) + "\n"


def plain_markdown(doc: dict[str, Any]) -> str:
    """--plain's table: per prompt llama.cpp's and edgespec's plain tok/s, and their ratio."""
    lines = [
        "| suite | prompt | llama.cpp plain tok/s | edgespec none tok/s | ratio |",
        "|---|---|---|---|---|",
    ]
    for suite, results in doc["suites"].items():
        for r in results:
            m, ratio = r["median_tok_s"], r["plain_over_llama_plain"]
            row = [suite, r["name"], f"{m[LLAMA_PLAIN]:.2f}", f"{m['edgespec plain']:.2f}"]
            lines.append("| " + " | ".join([*row, f"{ratio:.3f}"]) + " |")
    g = doc["plain_over_llama_plain"]
    lines.append(
        f"\nedgespec none / llama.cpp plain, geometric mean: {g['geomean']:.3f} "
        f"({g['min']:.3f}-{g['max']:.3f})"
    )
    return "\n".join(lines)


def suite_geomeans(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A suite's geometric means over its prompts' summaries (`summarise`)."""
    ratios = [r["summary"]["auto_over_best_llama"] for r in results]
    held = [r["summary"]["auto_over_heldout_best_llama"] for r in results]
    return {
        "auto_over_best_llama": geomean(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "auto_over_heldout_best_llama": None if None in held else geomean(held),
        "auto_over_plain": geomean([r["summary"]["auto_over_plain"] for r in results]),
        "best_llama_over_plain": geomean([r["summary"]["best_llama_over_plain"] for r in results]),
    } | {
        key: geomean([r["summary"][key] for r in results])
        for key in PLAIN_RATIOS
        if all(key in r["summary"] for r in results)
    }
