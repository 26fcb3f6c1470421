"""The GPU check's Python part, run by check.sh once llama.cpp is in place: make the models,
run edgespec's own commands on them, and sum up.

    python benchmarks/gpu/check.py models --sizes gpu|small --work DIR --tokenizer FILE
    python benchmarks/gpu/check.py run --sizes gpu|small --work DIR --out DIR [--budget S]

Steps, most important first, each with a time limit taken from what is left of --budget (a
step that no longer fits is skipped and named in the summary):

1. models (written while llama.cpp builds): random-weight Qwen2 GGUFs (random_gguf.py) with
   the default pair's tokenizer: the 1.5B target, its perturbed copy (the draft for
   losslessness: acceptance high), the 0.5B draft and, at gpu sizes, the 7B (Qwen2.5-7B's
   shape).
2. `edgespec doctor --json`, its test decode on the 1.5B.
3. `edgespec plan --json` for the default pair's shapes (1.5B target, 0.5B draft): offload,
   memory, the tau curve, c, and the drafter chosen with its reason; then shapes.py on the
   1.5B: a batch size's first-use cost (per process or per context), tau(n) at 1,024 and 4,096
   tokens of context against calibration's 64, a CUDA graph's plain step against one between
   other sizes, and the plain step `auto` learned in a new process against the calibration's.
4. `edgespec bench` on the 1.5B with its perturbed copy: none, model:k=4 and auto on the
   prompts in prompts.jsonl, greedy; bench compares each configuration's tokens with none's
   (the losslessness check: a difference is excused only at a near-tie of the target's two
   best logits) and measures the time outside llama.cpp per generated token.
5. at gpu sizes: `plan` for the 7B target with the 0.5B draft, and `bench` on the 7B with
   itself as the draft (acceptance near 100%: the rounds are as long as K allows).
6. `bench` on the 1.5B with itself as the draft.

Outputs (at most three files, as the device tool brings back): summary.txt, results.json
(every document the commands printed or wrote), and check.sh adds logs.tar.gz.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import random_gguf as models  # this folder's modules, beside this script
from summary import summary

HERE = Path(__file__).resolve().parent

# Per size: the models' layers (None: the real shape's), whether to add the 7B, and the bench's
# tokens per prompt. The dry run's models keep the real widths and vocabulary, with 2 layers.
SIZES: dict[str, dict[str, Any]] = {
    "small": {"layers": 2, "big": False, "tokens": 24},
    "gpu": {"layers": None, "big": True, "tokens": 64},
}
PERTURB = 0.03  # the draft copy's output-scale jitter: a few % of greedy tokens differ
CONFIGS = "none,model:k=4,auto"
RESERVE_S = 20  # kept for the summary and the logs' archive


@dataclass
class Check:
    work: Path
    out: Path
    deadline: float
    results: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(
        self,
        name: str,
        args: list[str],
        limit: float,
        json_file: Path | None = None,
        script: Path | None = None,
    ) -> None:
        """`python -m edgespec ARGS` (or `python SCRIPT ARGS`), its JSON (stdout, or
        `json_file`) kept as `name`. A plan runs with EDGESPEC_DEBUG=1: its log then holds
        llama.cpp's own account of the load (the layers it offloaded, the buffers on each
        device)."""
        env = os.environ | ({"EDGESPEC_DEBUG": "1"} if args[0] == "plan" else {})
        limit = min(limit, self.left() - RESERVE_S)
        if limit < 10:
            self.skipped.append(name)
            return
        log = self.work / "logs" / f"{name}.log"
        start = time.monotonic()
        cmd = [sys.executable, *([str(script)] if script else ["-m", "edgespec"]), *args]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=limit, check=False, env=env
            )
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, stdout, stderr = -1, _text(e.stdout), _text(e.stderr) + f"\ntimed out ({limit}s)"
        log.write_text(f"$ {' '.join(cmd)}\n{stderr}")
        doc: Any = None
        try:
            doc = json.loads(json_file.read_text() if json_file else stdout)
        except (OSError, ValueError):
            doc = None
        self.results[name] = {
            "rc": rc,
            "seconds": round(time.monotonic() - start, 1),
            "doc": doc,
            "stderr_tail": stderr[-2000:],
        }
        print(f"[check] {name}: rc={rc} in {self.results[name]['seconds']} s", file=sys.stderr)


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def make_models(work: Path, tok_file: Path, size: dict[str, Any]) -> dict[str, Any]:
    """The check's models, and how long each took to write (work/models.json)."""
    tok = models.load_tokenizer(tok_file)
    folder = work / "models"
    folder.mkdir(parents=True, exist_ok=True)
    layers = size["layers"]
    plan = {
        "t1.5b": (models.sized("1.5b", layers), 0.0),
        "t1.5b-perturbed": (models.sized("1.5b", layers), PERTURB),
        "d0.5b": (models.sized("0.5b", layers), 0.0),
    }
    if size["big"]:
        plan["t7b"] = (models.sized("7b", layers), 0.0)
    made: dict[str, dict[str, Any]] = {}
    for name, (shape, perturb) in plan.items():
        start = time.monotonic()
        seed = 1 if name == "d0.5b" else 0
        path = models.write_model(folder / f"{name}.gguf", shape, tok, seed=seed, perturb=perturb)
        made[name] = {
            "path": str(path),
            "bytes": path.stat().st_size,
            "seconds": round(time.monotonic() - start, 1),
            "shape": vars(shape),
            "perturb": perturb,
        }
        print(f"[check] {name}: {made[name]['bytes'] / 1e9:.2f} GB in {made[name]['seconds']} s")
    (work / "models.json").write_text(json.dumps(made, indent=1))
    return made


def run_steps(c: Check, m: dict[str, Path], tokens: int) -> None:
    prompts = str(HERE / "prompts.jsonl")

    def bench(name: str, target: Path, draft: Path, limit: float) -> None:
        out = c.work / f"{name}.json"
        args = ["bench", "--offline", "--target", str(target), "--draft", str(draft)]
        args += ["--suite", prompts, "--configs", CONFIGS, "-n", str(tokens), "-r", "1"]
        c.run(name, [*args, "--json", str(out)], limit, out)

    c.run("doctor", ["doctor", "--json", "--model", str(m["t1.5b"])], 120)
    pair = ["--offline", "--target", str(m["t1.5b"]), "--draft", str(m["d0.5b"])]
    c.run("plan-1.5b", ["plan", "--json", *pair], 240)
    # After the plan, whose calibration the last of its questions compares with (shapes.py).
    shapes = [str(m["t1.5b"]), "--draft", str(m["d0.5b"]), "--out", str(c.work / "shapes.json")]
    c.run("shapes-1.5b", shapes, 150, c.work / "shapes.json", HERE / "shapes.py")
    bench("bench-1.5b", m["t1.5b"], m["t1.5b-perturbed"], 300)
    if "t7b" in m:
        big = ["--offline", "--target", str(m["t7b"]), "--draft", str(m["d0.5b"])]
        c.run("plan-7b", ["plan", "--json", *big], 180)
        bench("bench-7b", m["t7b"], m["t7b"], 180)
    bench("bench-1.5b-self", m["t1.5b"], m["t1.5b"], 180)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("models", help="write the models (needs numpy and gguf only)")
    m.add_argument("--tokenizer", type=Path, required=True)
    r = sub.add_parser("run", help="run the checks on the models written, and sum up")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--budget", type=float, default=500, help="seconds for the checks")
    for p in (m, r):
        p.add_argument("--sizes", choices=sorted(SIZES), default="small")
        p.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    if args.command == "models":
        make_models(args.work, args.tokenizer, SIZES[args.sizes])
        return
    args.out.mkdir(parents=True, exist_ok=True)
    c = Check(args.work, args.out, time.monotonic() + args.budget)
    c.results["machine"] = machine()
    c.results["sizes"] = args.sizes
    c.results["models"] = json.loads((args.work / "models.json").read_text())
    run_steps(c, {k: Path(v["path"]) for k, v in c.results["models"].items()},
              SIZES[args.sizes]["tokens"])  # fmt: skip
    c.results["skipped"] = c.skipped
    compiles = args.work / "logs" / "compile-peaks.txt"
    if compiles.exists():  # check.sh's launcher: each CUDA compile job's peak memory (KiB)
        c.results["cuda_compile_peak_kib"] = compile_peaks(compiles.read_text())
    (args.out / "results.json").write_text(json.dumps(c.results, indent=1))
    text = summary(c.results)
    (args.out / "summary.txt").write_text(text)
    print(text)
    sys.exit(0 if lossless(c.results) else 1)


def machine() -> dict[str, Any]:
    """What ran the check: the CPU, and the GPU as nvidia-smi names it."""
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap",
         "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    ) if _has("nvidia-smi") else None  # fmt: skip
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "gpu": gpu.stdout.strip() if gpu is not None and gpu.returncode == 0 else None,
        "python": platform.python_version(),
        "node": platform.node(),
    }


def _has(program: str) -> bool:
    from shutil import which

    return which(program) is not None


def compile_peaks(text: str) -> dict[str, Any]:
    """The CUDA build's compile jobs' peak memory, from check.sh's launcher ("KiB file" a line):
    what one job takes, for scripts/install.py's CUDA_JOB_MEMORY."""
    peaks = sorted(
        (int(kib), name) for kib, _, name in (line.partition(" ") for line in text.splitlines())
        if kib.isdigit()
    )  # fmt: skip
    if not peaks:
        return {"jobs": 0}
    kib = [k for k, _ in peaks]
    return {
        "jobs": len(peaks),
        "max_kib": kib[-1],
        "max_file": peaks[-1][1],
        "median_kib": int(statistics.median(kib)),
    }


def lossless(results: dict[str, Any]) -> bool:
    """Every bench that ran says lossless (bench's own verdict: near-ties excused)."""
    benches = [v for k, v in results.items() if k.startswith("bench-")]
    return bool(benches) and all(b["doc"] is not None and b["doc"]["lossless"] for b in benches)


if __name__ == "__main__":
    main()
