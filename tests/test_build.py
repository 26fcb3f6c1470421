"""The installed llama.cpp build: no AMX tile instruction on x86-64 (they crash, see
docs/install.md), and a scanner that would see one if it were there."""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from edgespec.buildcheck.smoke import library_dir

X86_64 = platform.machine().lower() in ("x86_64", "amd64")
# Every AMX instruction (AMX-TILE, -INT8, -BF16, -FP16, -COMPLEX).
AMX = re.compile(
    r"\s(ldtilecfg|sttilecfg|tilerelease|tilezero|tileloadd|tileloaddt1|tilestored"
    r"|tdpb[su][su]d|tdpbf16ps|tdpfp16ps|tcmmimfp16ps|tcmmrlfp16ps)\s"
)
needs_x86 = pytest.mark.skipif(
    not X86_64,
    reason=f"AMX is an x86-64 instruction set; this machine is {platform.machine()}, "
    "whose llama.cpp build has no AMX kernels to leave out",
)


def amx_instructions(binary: Path) -> set[str]:
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils, which the C toolchain brings) is needed to scan"
    listing = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(binary)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(AMX.findall(listing))


@needs_x86
def test_the_scanner_finds_amx_instructions(tmp_path: Path) -> None:
    source = tmp_path / "amx.s"
    source.write_text(
        ".text\n"
        "ldtilecfg (%rdi)\n"
        "tilezero %tmm0\n"
        "tileloadd (%rsi,%rdx,1), %tmm1\n"
        "tdpbssd %tmm2, %tmm1, %tmm0\n"
        "tdpbf16ps %tmm2, %tmm1, %tmm0\n"
        "tilestored %tmm0, (%rsi,%rdx,1)\n"
        "tilerelease\n"
        "ret\n"
    )
    obj = tmp_path / "amx.o"
    subprocess.run(["as", "-o", str(obj), str(source)], check=True)
    found = amx_instructions(obj)
    assert found == {
        "ldtilecfg", "tilezero", "tileloadd", "tdpbssd", "tdpbf16ps", "tilestored", "tilerelease"
    }  # fmt: skip


@needs_x86
def test_installed_llama_cpp_has_no_amx_tile_instruction() -> None:
    folder = library_dir()
    assert folder is not None and folder.is_dir()
    # The same library appears under several names (libggml-cpu.so, .so.0, .so.0.25.3), as
    # links or, as pip installs them, as copies: each is disassembled once (a second or more).
    named = sorted(p for p in folder.iterdir() if ".so" in p.name or p.suffix == ".dylib")
    libraries = list({hashlib.sha256(p.read_bytes()).digest(): p for p in named}.values())
    assert any(p.name.startswith("libggml-cpu") for p in libraries), libraries
    found = {p.name: amx_instructions(p) for p in libraries}
    assert all(not names for names in found.values()), (
        f"AMX instructions in the llama.cpp build: {found}; reinstall with scripts/install.sh"
    )
