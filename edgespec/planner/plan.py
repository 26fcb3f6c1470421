"""`DecodePlan`, everything decided before weights load, and its JSON (`plan --json`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgespec.options import DrafterKind, DrafterSpec
from edgespec.planner.calibrate import Calibration
from edgespec.planner.choice import DrafterChoice
from edgespec.planner.memory import MemoryPlan, ModelMemory
from edgespec.planner.resources import Resources


@dataclass(frozen=True, kw_only=True)
class LinkCost:
    """What a target step costs through the RPC servers, against this machine alone."""

    target_step_s: float  # measured through the servers (calibration)
    local_step_s: float | None  # this machine's own calibration, when there is one
    rtt_s: float  # the slowest server's round trip for a small command

    def describe(self) -> str:
        step = f"a target step through the RPC servers costs {self.target_step_s * 1000:.1f} ms"
        rtt = f"a network round trip {self.rtt_s * 1000:.2f} ms"
        if self.local_step_s is None:
            return f"{step} ({rtt}; no local calibration of the target to compare with)"
        extra = (self.target_step_s - self.local_step_s) * 1000
        return (
            f"{step}, {extra:+.1f} ms against {self.local_step_s * 1000:.1f} ms on this machine "
            f"alone ({rtt}): every round saved by speculation saves that"
        )


@dataclass(frozen=True, kw_only=True)
class DecodePlan:
    """Everything decided before weights load: what `edgespec plan --json` prints."""

    target: Path
    draft: Path | None  # the draft model to load; None: none is loaded
    draft_reason: str  # why it is, or is not, loaded
    resources: Resources
    drafter: DrafterSpec  # the drafter used unless a call asks for another
    k: int  # its K: fixed, or for `auto` the most it may choose in a round
    drafters: tuple[DrafterKind, ...]  # the drafters that can run with what is loaded
    calibration: Calibration | None = None  # measured (or cached) for `auto`
    calibration_cached: bool = False
    choice: DrafterChoice | None = None  # what `auto` may use, and why
    link: LinkCost | None = None  # with RPC servers, once calibrated
    memory: Path | None = None  # `--memory`: past generations for auto's suffix drafts

    def to_json(self) -> dict[str, Any]:
        doc = plan_document(self.resources, self.calibration, self.calibration_cached, self.choice)
        doc["rpc"] = _rpc_document(self.resources, self.link) if self.resources.servers else None
        doc["models"] = {
            "target": str(self.target),
            "draft": str(self.draft) if self.draft else None,
        }
        doc["draft_model"] = {"loaded": self.draft is not None, "reason": self.draft_reason}
        doc["drafter"] = {"name": self.drafter.label, "k": self.k, "allowed": list(self.drafters)}
        return doc


def _mem(m: ModelMemory | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "file": m.name,
        "weights": m.weights,
        "kv_cache": m.kv_cache,
        "compute": m.compute,
        "total": m.total,
        "gpu": {
            "layers": m.gpu_layers,
            "of": m.layers,
            "weights": m.gpu_weights,
            "kv_cache": m.gpu_kv_cache,
            "compute": m.gpu_compute,
            "total": m.gpu,
        },
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _rpc_document(resources: Resources, link: LinkCost | None) -> dict[str, Any]:
    shares = iter(resources.split)
    servers = [
        {
            "server": str(s.endpoint),
            "protocol": ".".join(map(str, s.version)),
            "devices": [
                {"free": free, "total": total, "share": round(next(shares), 4)}
                for free, total in s.memory
            ],
            "rtt_ms": round(s.rtt_s * 1000, 3),
            "free_from": s.free_from,
        }
        for s in resources.servers
    ]
    doc: dict[str, Any] = {"servers": servers, "link": None}
    if link is not None:
        doc["link"] = {
            "target_step_ms": _ms(link.target_step_s),
            "local_target_step_ms": _ms(link.local_step_s),
            "note": link.describe(),
        }
    return doc


def _gpu_document(mem: MemoryPlan) -> dict[str, Any] | None:
    """This machine's GPU memory against what the plan puts there (None: none reported)."""
    if mem.vram is None:
        return None
    return {
        "free": mem.vram,
        "budget": mem.vram_budget,
        "target": mem.target_vram,
        "both": mem.both_vram if mem.draft else None,
        # The GPU computes from the RAM: what it holds is in the RAM's numbers too.
        "unified": mem.unified,
    }


def plan_document(
    resources: Resources,
    calibration: Calibration | None,
    cached: bool,
    choice: DrafterChoice | None,
) -> dict[str, Any]:
    """The plan's measured and decided parts as JSON-ready data."""
    mem = resources.memory
    doc: dict[str, Any] = {
        "hardware": resources.hardware.as_dict(),
        "memory": {
            "target": _mem(mem.target),
            "draft": _mem(mem.draft),
            "runtime": mem.runtime,
            "target_only": mem.target_only,
            "both": mem.both if mem.draft else None,
            "available": mem.available,
            "budget": mem.budget,
            "fit": resources.fit.value,
            "gpu": _gpu_document(mem),
            "notes": list(resources.notes),
        },
        "settings": {
            "n_ctx": resources.n_ctx,
            "n_threads": resources.n_threads,
            "n_gpu_layers": resources.n_gpu_layers,
            "draft_gpu_layers": resources.draft_gpu_layers,
            "flash_attn": resources.flash_attn,
            "slots": resources.slots,
        },
        "calibration": None,
        "decision": None,
    }
    if calibration is not None:
        doc["calibration"] = {
            "target_step_ms": _ms(calibration.target_step_s),
            "draft_step_ms": _ms(calibration.draft_step_s),
            "c": None if calibration.c is None else round(calibration.c, 4),
            "tau": {str(n): round(v, 4) for n, v in sorted(calibration.tau.items())},
            "seconds": round(calibration.seconds, 3),
            "cached": cached,
            "passes": calibration.passes,
            "noise": None if calibration.noise is None else round(calibration.noise, 4),
            "dips": calibration.dips(),
            "draft_tau": {str(n): round(v, 4) for n, v in sorted(calibration.draft_tau.items())},
        }
    if choice is not None:
        doc["decision"] = {
            "drafter": DrafterKind.AUTO,
            "drafters": [DrafterKind.NGRAM, *([DrafterKind.MODEL] if choice.use_model else [])],
            "model_k": choice.model_k,
            "model_expected_speedup": round(choice.model_speed, 3),
            "ngram_k_at_high_acceptance": choice.ngram_k,
            "ngram_expected_speedup": round(choice.ngram_speed, 3),
            "reason": choice.reason,
        }
    return doc
