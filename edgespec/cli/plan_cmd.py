"""`edgespec plan`: what the planner sees on this device and what it decides."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from edgespec.api import DrafterKind, Drafting
from edgespec.cli import loading
from edgespec.cli.console import gb, print_tables, say
from edgespec.cli.options import (
    DEFAULT_MODELS,
    Json,
    ModelOptions,
    PairArgument,
    Parallel,
    with_shared_options,
)
from edgespec.system.device import cores_text


@with_shared_options(pair=PairArgument)
def plan(
    models: ModelOptions = DEFAULT_MODELS,
    recalibrate: Annotated[bool, typer.Option("--recalibrate", help="Measure again.")] = False,
    parallel: Parallel = None,
    json_out: Json = False,
) -> None:
    """Show the hardware, the memory budget, the calibration and the drafter choice."""
    options = models.decode(recalibrate=recalibrate, parallel=parallel)
    plan = loading.plan_only(options, Drafting.of(DrafterKind.AUTO))
    doc = plan.to_json()
    if json_out:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    _render(doc)


def _render(doc: dict[str, Any]) -> None:
    _render_hardware(doc["hardware"])
    print_tables(_memory_table(doc["memory"]))
    _render_gpu(doc)
    _render_fit(doc)
    _render_calibration(doc["calibration"])
    dec = doc["decision"]
    say(f"[bold]decision[/] drafter auto using {' + '.join(dec['drafters'])}")
    say(f"  {dec['reason']}", markup=False)
    if doc["rpc"]:
        _render_rpc(doc["rpc"])
    draft = doc["draft_model"]
    say(f"[bold]draft model[/] {'loaded' if draft['loaded'] else 'not loaded'}")
    say(f"  {draft['reason']}", markup=False)


def _render_hardware(hw: dict[str, Any]) -> None:
    say(
        f"[bold]hardware[/] {escape(hw['machine'])}, "
        f"{cores_text(hw['physical_cores'], hw.get('performance_cores'))} "
        f"({hw['logical_cores']} threads), RAM {gb(hw['total_ram'])} total / "
        f"{gb(hw['available_ram'])} available, backend {hw['backend']}"
        + ("" if hw["on_battery"] is None else f", on battery: {hw['on_battery']}")
    )


def _memory_table(mem: dict[str, Any]) -> Table:
    """What each model needs in RAM (and on the GPU, where one takes layers), the total against
    what may be used."""
    gpu = mem["gpu"]
    table = Table(title="memory (estimated)", title_justify="left")
    columns = ["model", "weights", "KV cache", "compute", "total"]
    for col in columns + (["on the GPU"] if gpu else []):
        table.add_column(col, justify="right" if col != "model" else "left")
    for role in ("target", "draft"):
        m = mem[role]
        if m:
            on_gpu = [f"{gb(m['gpu']['total'])} ({m['gpu']['layers']}/{m['gpu']['of']} layers)"]
            table.add_row(
                f"{role}: {m['file']}",
                gb(m["weights"]),
                gb(m["kv_cache"]),
                gb(m["compute"]),
                gb(m["total"]),
                *(on_gpu if gpu else []),
            )
    table.add_row("runtime", "", "", "", gb(mem["runtime"]))
    both = mem["both"] is not None
    table.add_row(
        "both models" if both else "target only",
        "",
        "",
        "",
        gb(mem["both"] if both else mem["target_only"]),
        *([gb(gpu["both"] if both else gpu["target"])] if gpu else []),
        style="bold",
    )
    usable = [gb(gpu["budget"])] if gpu else []
    table.add_row("usable (90% of available)", "", "", "", gb(mem["budget"]), *usable)
    return table


def _render_gpu(doc: dict[str, Any]) -> None:
    """The GPUs' memory, and what was given up where the models did not fit."""
    mem, gpu = doc["memory"], doc["memory"]["gpu"]
    if gpu:
        names = ", ".join(
            f"{g['name']} ({g['description']}, {gb(g['free'])} free of {gb(g['total'])})"
            for g in doc["hardware"]["gpus"]
        )
        unified = "; it is the RAM itself, so what it holds counts in RAM too" * gpu["unified"]
        say(f"[bold]GPU memory[/] {escape(names)}: {gb(gpu['budget'])} usable{unified}")
    for note in mem["notes"]:
        say(f"  {note}", markup=False)


def _render_fit(doc: dict[str, Any]) -> None:
    """Which models fit, and the settings the plan runs them with."""
    fit = {
        "both": "both models fit: the draft model may be used",
        "target": "only the target fits: draft-free drafters only",
    }[doc["memory"]["fit"]]
    s = doc["settings"]

    def layers(n: int) -> str:
        return "all" if n < 0 else str(n)

    where = "on the RPC servers" if doc["rpc"] else "on the GPU"
    draft = f", the draft's {layers(s['draft_gpu_layers'])} on the GPU" * bool(
        doc["memory"]["draft"]
    )
    flash = {None: "llama.cpp's choice", False: "off", True: "on"}[s["flash_attn"]]
    say(
        f"[bold]fit[/] {fit}; context {s['n_ctx']} tokens, {s['n_threads']} threads, "
        f"{layers(s['n_gpu_layers'])} of the target's layers {where}{draft}, "
        f"flash attention {flash}"
    )
    slots = s.get("slots", 1)
    kv = sum(m["kv_cache"] for m in (doc["memory"]["target"], doc["memory"]["draft"]) if m)
    say(
        f"[bold]serve[/] {slots} slot{'s' * (slots > 1)} (requests generated at once, "
        f"--parallel): KV cache {kv / slots / 1e9:.2f} GB each, {kv / 1e9:.2f} GB in all"
    )


def _render_calibration(cal: dict[str, Any]) -> None:
    """The measured step times and batch costs the decision rests on, and how repeatable."""
    taus = ", ".join(f"{n}:{v:.2f}" for n, v in cal["tau"].items())
    how = "cached" if cal["cached"] else f"measured in {cal['seconds']:.1f} s"
    line = f"[bold]calibration[/] ({how}) target step {cal['target_step_ms']:.1f} ms"
    if cal["c"] is not None:
        line += f", draft step {cal['draft_step_ms']:.1f} ms (c = {cal['c']:.2f})"
    say(line)
    say(f"  tau(n) = T(n)/T(1): {taus}", markup=False)
    if cal["noise"] is not None:
        dips = ", ".join(f"tau({n}) < tau({n - 1})" for n in cal["dips"]) or "none"
        say(
            f"  repeatability: {cal['noise']:.1%} between {cal['passes']} interleaved passes; "
            f"kernel-shape dips beyond that: {dips}",
            markup=False,
        )
    if cal["draft_tau"]:
        batches = ", ".join(f"{n}:{v:.2f}" for n, v in cal["draft_tau"].items())
        say(f"  draft batches (catch-up, prefill) T_d(n)/T_d(1): {batches}", markup=False)


FREE_FROM = {"given": "as given by --rpc", "this machine": "available on this machine"}


def _render_rpc(rpc: dict[str, Any]) -> None:
    for server in rpc["servers"]:
        devices = ", ".join(
            f"{gb(d['free'])} free of {gb(d['total'])}, {d['share']:.0%} of the layers"
            for d in server["devices"]
        )
        source = server.get("free_from", "reported")
        free = "" if source == "reported" else f"; free memory {FREE_FROM.get(source, source)}"
        say(
            f"[bold]rpc[/] {server['server']} (protocol {server['protocol']}, round trip "
            f"{server['rtt_ms']:.2f} ms{free}): {devices}"
        )
    if rpc["link"]:
        say(f"  {rpc['link']['note']}", markup=False)
