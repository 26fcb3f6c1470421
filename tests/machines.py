"""Cost curves and hardware of the machines the planner's tests stand in for."""

from __future__ import annotations

from edgespec.system.device import GpuDevice, Hardware

# tau(n) as measured on this 2-core CPU (Qwen2.5-Coder 1.5B) and a flat GPU-like curve.
CPU_TAU = {
    1: 1.0,
    2: 1.71,
    3: 2.11,
    4: 2.57,
    5: 3.23,
    6: 3.78,
    7: 4.26,
    8: 4.52,
    12: 5.57,
    16: 5.29,
    24: 8.19,
    32: 9.9,
}
# A flat GPU-like curve, measured where calibration measures: every n to 17, then every 4th.
GPU_TAU = {n: 1.0 + 0.02 * (n - 1) for n in (*range(1, 18), 20, 24, 28, 32)}


# Measured on the 2-core EPYC of 2026-11-30 (target step 40.6 ms): verification is steep.
STEEP_TAU = {
    **{1: 1.0, 2: 1.94, 3: 2.74, 4: 3.36, 5: 4.11, 6: 4.85, 7: 5.72, 8: 7.97, 9: 8.7, 10: 9.0},
    **{11: 9.62, 12: 9.93, 13: 10.79, 14: 11.17, 15: 11.87, 16: 10.53, 17: 12.81, 20: 14.43},
    **{24: 16.29, 28: 18.35, 32: 19.07},
}


def hardware(available: int, gpu: bool = False) -> Hardware:
    return Hardware(
        available * 2, available, 4, 8, gpu, "cuda" if gpu else "cpu", None, "Linux x86_64"
    )


def cuda_pc(vram_free: int, available: int, vram_total: int = 8_000_000_000) -> Hardware:
    """A Linux PC with one NVIDIA card: memory of its own, apart from the RAM."""
    card = GpuDevice("CUDA0", "NVIDIA GeForce RTX 4060", vram_free, vram_total, unified=False)
    return Hardware(
        available * 2, available, 8, 16, True, "cuda", None, "Linux x86_64", gpus=(card,)
    )


def apple_mac(total_ram: int, available: int, gpu_free: int) -> Hardware:
    """An Apple Silicon Mac: Metal computes from the RAM, and ggml reports as the GPU's memory
    the working set macOS recommends, less what is allocated."""
    gpu = GpuDevice("MTL0", "Apple M1", gpu_free, gpu_free, unified=True)
    return Hardware(total_ram, available, 8, 8, True, "metal", None, "Darwin arm64", gpus=(gpu,))
