"""A heavy target on any machine: the default target turned into F16 by llama.cpp's own
quantizer, so that the draft model pays where it otherwise cannot.

    python scripts/heavy_pair.py [--type F16|Q8_0]      # prints the target's path

On a 2-core CPU the default pair's 0.5B draft costs half a step of the 1.5B Q4_K_M target, so
drafting with it never pays there. The same model in F16 reads 3.2x the bytes per step while
the draft's cost stays: a draft step is then a fifth of a target step and verifying a few tokens
costs little more than one, the regime of a 7B Q4 target on a laptop or of any target on Metal
or CUDA. `edgespec run/plan/bench --target PATH` take the file like any GGUF; the draft is the
default pair's.

    python scripts/heavy_pair.py --draft                # prints a Q4_0 draft's path

`--draft` derives the default draft model in Q4_0 throughout (`llama-quantize --pure`). The
official 0.5B Q4_K_M file is mostly Q5_0 (its width, 896, is no multiple of the k-quants' 256)
with a Q8_0 output layer; on the CPU llama.cpp's Q4_0 kernels run a draft step in about half the
time and the draft's first choice is still the target's as often on code (2 points less often
on prose; benchmarks/HISTORY.md, "A Q4_0 draft").

Each file is derived from the verified Q4_K_M (its sha256 is the registry's) with
`llama-quantize --allow-requantize`, built from the llama.cpp that llama-cpp-python vendors
(scripts/build_llama_tools.sh), and kept in edgespec's store beside a record of its sha256;
`--verify` hashes it again against that record.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from edgespec import paths
from edgespec.models import files
from edgespec.models.registry import load_registry

ROOT = Path(__file__).resolve().parent.parent
TYPES = ("F16", "Q8_0")
# What the conversion gave on this project's machine (llama-cpp-python 0.3.36, GCC 12, a 2-core
# AMD EPYC): another compiler or CPU may round a dequantized weight differently, so a mismatch
# is reported, not refused.
RECORDED = {"F16": "898951bef64184eeacd1101bb2c70450d31f534456f87ac964039972d47d8cb1"}
DRAFT_TYPE = "Q4_0"
DRAFT_RECORDED = "0e453f0655205b749b4e5f471990d2380dba2ccb8ddc9f643af97184fb599694"


def quantizer() -> Path:
    """llama-quantize of the vendored llama.cpp (built once, then reused)."""
    built = subprocess.run(
        ["sh", str(ROOT / "scripts" / "build_llama_tools.sh"), "llama-quantize"],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise SystemExit(f"building llama-quantize failed:\n{built.stderr[-2000:]}")
    return Path(built.stdout.strip().splitlines()[-1])


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def heavy_target(kind: str = "F16", verify: bool = False) -> Path:
    """The default target as `kind`, derived once; its record names the source and sha256."""
    if kind not in TYPES:
        raise SystemExit(f"--type must be one of {', '.join(TYPES)}")
    source = files.fetch(load_registry().default_pair.target).path  # sha256 verified
    return derived(source, kind, [], RECORDED.get(kind), verify)


def q4_0_draft(verify: bool = False) -> Path:
    """The default draft model in Q4_0 throughout, derived once (its record as above)."""
    source = files.fetch(load_registry().default_pair.draft).path  # sha256 verified
    return derived(source, DRAFT_TYPE, ["--pure"], DRAFT_RECORDED, verify)


def derived(
    source: Path, kind: str, options: list[str], expected: str | None, verify: bool
) -> Path:
    """`source` requantized to `kind` by llama-quantize with `options`, once, in the store."""
    out = paths.home() / "derived" / f"{source.stem.replace('q4_k_m', kind.lower())}-from-q4km.gguf"
    record = out.with_suffix(".json")
    if not out.exists() or not record.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_suffix(".part")
        done = subprocess.run(
            [str(quantizer()), "--allow-requantize", *options, str(source), str(part), kind],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"llama-quantize failed:\n{done.stderr[-2000:]}")
        doc = {"source": source.name, "type": kind, "sha256": sha256(part)}
        if (expected or doc["sha256"]) != doc["sha256"]:
            print(f"note: {out.name} differs from the one recorded ({expected})", file=sys.stderr)
        part.rename(out)
        record.write_text(json.dumps(doc, indent=1) + "\n")
    elif verify:
        recorded = json.loads(record.read_text())["sha256"]
        if sha256(out) != recorded:
            raise SystemExit(f"{out} does not match its record {record}: delete both to redo it")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--type", default="F16", choices=TYPES)
    parser.add_argument("--draft", action="store_true", help="derive the Q4_0 draft instead")
    parser.add_argument("--verify", action="store_true", help="hash the file against its record")
    args = parser.parse_args()
    path = q4_0_draft(args.verify) if args.draft else heavy_target(args.type, args.verify)
    print(f"sha256 {json.loads(path.with_suffix('.json').read_text())['sha256']}", file=sys.stderr)
    print(path)


if __name__ == "__main__":
    main()
