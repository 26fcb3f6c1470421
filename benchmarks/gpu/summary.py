"""The GPU check's summary: results.json (check.py) as the text printed last and kept in
summary.txt. `python benchmarks/gpu/summary.py results.json` prints it again."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB"


def _head(r: dict[str, Any]) -> list[str]:
    m = r["machine"]
    lines = [
        f"GPU check, sizes {r['sizes']}: GPU {m['gpu'] or 'none (a dry run)'}; CPU {m['cpu']}; "
        f"Python {m['python']}",
        "models (random weights, the default pair's tokenizer):",
    ]
    for name, doc in r["models"].items():
        s = doc["shape"]
        extra = f", output scales jittered by {doc['perturb']}" if doc["perturb"] else ""
        lines.append(
            f"  {name}: {s['layers']} layers x {s['hidden']}, ffn {s['ffn']}, heads "
            f"{s['heads']}/{s['kv_heads']}, vocab {s['vocab']}; {_gb(doc['bytes'])} Q4_0 "
            f"written in {doc['seconds']} s{extra}"
        )
    return lines


def _doctor(step: dict[str, Any] | None) -> list[str]:
    if step is None or step["doc"] is None:
        return ["doctor: no report" + _failed(step)]
    doc = step["doc"]
    lines = [f"doctor ({'all checks passed' if doc['ok'] else 'a check failed'}):"]
    for c in doc["checks"]:
        lines.append(f"  {c['status']:<5} {c['name']}: {c['detail']}")
    return lines


def _failed(step: dict[str, Any] | None) -> str:
    if step is None:
        return " (not run)"
    tail = step["stderr_tail"].strip().splitlines()
    return f" (rc {step['rc']}: {tail[-1] if tail else 'no output'})"


def _plan(title: str, step: dict[str, Any] | None) -> list[str]:
    if step is None or step["doc"] is None:
        return [f"plan, {title}: no plan" + _failed(step)]
    doc = step["doc"]
    hw, mem, s = doc["hardware"], doc["memory"], doc["settings"]
    layers = "all" if s["n_gpu_layers"] < 0 else s["n_gpu_layers"]
    lines = [
        f"plan, {title}:",
        f"  backend {hw['backend']}, {layers} layers offloaded, context {s['n_ctx']}, "
        f"{s['n_threads']} threads, flash attention {s['flash_attn']}",
        f"  memory: target {_gb((mem['target'] or {}).get('total'))}, draft "
        f"{_gb((mem['draft'] or {}).get('total'))}, both {_gb(mem['both'])}, budget "
        f"{_gb(mem['budget'])} of {_gb(mem['available'])} available: fit {mem['fit']}",
    ]
    cal = doc["calibration"]
    if cal is not None:
        taus = ", ".join(f"{n}:{v:.2f}" for n, v in cal["tau"].items())
        lines += [
            f"  calibration ({cal['seconds']} s, {cal['passes']} passes, noise {cal['noise']}): "
            f"target step {cal['target_step_ms']} ms, draft step {cal['draft_step_ms']} ms, "
            f"c = {cal['c']}",
            f"  tau(n) = T(n)/T(1): {taus}",
        ]
    dec = doc["decision"]
    if dec is not None:
        lines.append(f"  auto drafts with {' + '.join(dec['drafters'])}: {dec['reason']}")
    lines.append(f"  draft model {'loaded' if doc['draft_model']['loaded'] else 'not loaded'}: "
                 f"{doc['draft_model']['reason']}")  # fmt: skip
    return lines


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _config_line(label: str, prompts: list[dict[str, Any]], step_ms: float | None) -> str:
    runs = [m for p in prompts for m in p["runs"].get(label, [])]
    diverged = [p["divergences"][label] for p in prompts if label in p["divergences"]]
    same = len(prompts) - len(diverged)
    verdict = f"identical to none on {same}/{len(prompts)} prompts"
    for d in diverged:
        why = "near-tie, excused" if d["near_tie"] else "NOT LOSSLESS"
        verdict += f"; differs at token {d['position']} (logit gap {d['logit_gap']:.2f}: {why})"
    per_token = _mean([m["outside_ms_per_token"] for m in runs])
    per_pass = _mean([m["mean_accepted_length"] or 1.0 for m in runs])
    per_round = None if per_token is None or per_pass is None else per_token * per_pass
    share = "" if per_round is None or not step_ms else f" ({per_round / step_ms:.0%} of a step)"
    return (
        f"  {label}: {verdict}; acceptance {_fmt(_mean([m['acceptance_rate'] for m in runs]))}, "
        f"{_fmt(per_pass)} tokens/pass, {_fmt(_mean([m['tokens_per_s'] for m in runs]), 1)} "
        f"tok/s; outside llama.cpp {_fmt(per_token)} ms/token, {_fmt(per_round)} ms/round"
        f"{share}; draft outside {_fmt(_mean([m['draft_outside_ms'] for m in runs]))} ms/step"
    )


def _bench(title: str, step: dict[str, Any] | None) -> list[str]:
    if step is None or step["doc"] is None:
        return [f"bench, {title}: no result" + _failed(step)]
    doc = step["doc"]
    # The reference step: plain decoding's time per token in the same run (a target pass of
    # one token plus what it costs around it).
    plain = [m["tokens_per_s"] for p in doc["prompts"] for m in p["runs"].get("none", [])]
    speed = _mean([v for v in plain if v])
    step_ms = 1000 / speed if speed else None
    lines = [
        f"bench, {title} ({len(doc['prompts'])} prompts, greedy, at most "
        f"{doc['settings']['max_tokens']} tokens; plain decoding {_fmt(step_ms)} ms/token): "
        f"{'lossless' if doc['lossless'] else 'NOT LOSSLESS'}",
    ]
    lines += [_config_line(label, doc["prompts"], step_ms) for label in doc["configs"]]
    return lines


def _shapes(step: dict[str, Any] | None) -> list[str]:
    """shapes.py's answers, one line a question."""
    if step is None or step["doc"] is None:
        return ["shapes, 1.5B: no result" + _failed(step)]
    doc = step["doc"]

    def extras(first: dict[str, Any]) -> str:
        return ", ".join(f"{n}:{v['extra_ms']:+.1f}" for n, v in first.items())

    lines = [
        "shapes, 1.5B:",
        f"  first use, ms more than later runs, by batch size: {extras(doc['first_use'])}",
        f"  the same on a second context of the process: {extras(doc['first_use_second_context'])}",
    ]
    for context, ratios in doc["tau_over_calibrations"].items():
        step_ms = doc["tau_by_context"][context]["step_ms"]
        shown = ", ".join(f"{n}:{v:.2f}" for n, v in ratios.items())
        lines.append(f"  tau at {context} tokens over tau at 64 (step {step_ms} ms): {shown}")
    g = doc["graphs"]
    lines.append(
        f"  plain step repeated {g['repeated_ms']} ms, between other sizes {g['between_ms']} ms "
        f"(x{g['between_over_repeated']})"
    )
    learned = doc["learned"]
    lines.append(
        f"  auto's plain step after a new process's first answer {learned['learned_step_ms']} ms, "
        f"calibrated {learned['calibrated_step_ms']} ms (x{learned.get('learned_over_calibrated')})"
    )
    return lines


def _compiles(peaks: dict[str, Any] | None) -> list[str]:
    if not peaks or not peaks.get("jobs"):
        return []
    return [
        f"CUDA compile jobs: {peaks['jobs']}, peak memory {peaks['max_kib'] >> 10} MiB "
        f"({peaks['max_file']}), median {peaks['median_kib'] >> 10} MiB"
    ]


def summary(r: dict[str, Any]) -> str:
    lines = _head(r) + _doctor(r.get("doctor"))
    lines += _plan("the default pair's shapes (1.5B target, 0.5B draft)", r.get("plan-1.5b"))
    lines += _shapes(r.get("shapes-1.5b"))
    lines += _bench("1.5B with its perturbed copy as draft", r.get("bench-1.5b"))
    if r["sizes"] == "gpu":
        lines += _plan("7B target, 0.5B draft", r.get("plan-7b"))
        lines += _bench("7B with itself as draft", r.get("bench-7b"))
    lines += _bench("1.5B with itself as draft", r.get("bench-1.5b-self"))
    lines += _compiles(r.get("cuda_compile_peak_kib"))
    steps = {k: v["seconds"] for k, v in r.items() if isinstance(v, dict) and "seconds" in v}
    lines.append("seconds per step: " + ", ".join(f"{k} {v}" for k, v in steps.items()))
    if r["skipped"]:
        lines.append("SKIPPED (out of time): " + ", ".join(r["skipped"]))
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(summary(json.loads(Path(sys.argv[1]).read_text())))


if __name__ == "__main__":
    main()
