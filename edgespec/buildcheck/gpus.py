"""The NVIDIA GPUs of this machine, whatever llama.cpp was built for: a plain install gives a CPU
build, which runs on the CPU alone beside a GPU that would be many times faster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

WSL_SMI = "/usr/lib/wsl/lib/nvidia-smi"  # WSL2's driver folder, not on every PATH
PROC_DRIVER = Path("/proc/driver/nvidia")


def _smi() -> str | None:
    """nvidia-smi, which the driver installs: on PATH, else where the driver puts it."""
    found = shutil.which("nvidia-smi")
    if found:
        return found
    if sys.platform == "win32":  # System32 now, the NVSMI folder on older drivers
        programs = Path(os.environ.get("PROGRAMFILES", r"C:\Program Files"))
        candidates = [
            Path(os.environ.get("SYSTEMROOT", r"C:\Windows")) / "System32" / "nvidia-smi.exe",
            programs / "NVIDIA Corporation" / "NVSMI" / "nvidia-smi.exe",
        ]
    else:
        candidates = [Path(WSL_SMI)]
    return next((str(p) for p in candidates if p.is_file()), None)


def nvidia_gpus() -> list[str]:
    """The NVIDIA GPUs' names (`nvidia-smi -L`, else the Linux driver's own records); an
    unnamed one where only the driver is seen; none where there is no NVIDIA driver."""
    smi = _smi()
    if smi is not None:
        try:
            done = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            # "GPU 0: NVIDIA GeForce RTX 3060 (UUID: GPU-...)"
            names = [
                line.partition(":")[2].split(" (UUID")[0].strip()
                for line in done.stdout.splitlines()
                if line.startswith("GPU ")
            ]
            if names:
                return names
    return _driver_gpus()


def _driver_gpus() -> list[str]:
    """The Linux kernel driver's GPUs (each one's `information` file names its model)."""
    names = []
    for info in sorted(PROC_DRIVER.glob("gpus/*/information")):
        try:
            text = info.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model" and value.strip():
                names.append(value.strip())
    if not names and (PROC_DRIVER / "version").exists():
        return ["an NVIDIA GPU"]
    return names
