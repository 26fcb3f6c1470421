"""`edgespec models`: the registry's pairs and models, which are on disk, and the GGUF files
found where users keep models."""

from __future__ import annotations

import json
import sys

from rich.table import Table

from edgespec.cli.console import err, gb, print_tables
from edgespec.cli.models_found import found_entries, found_table
from edgespec.cli.options import Json
from edgespec.models import ModelSpec, find_local, load_registry


def _model_entry(spec: ModelSpec) -> dict[str, object]:
    local = find_local(spec)
    return {
        "name": spec.name,
        "repo": spec.repo,
        "files": list(spec.files),
        "size": spec.size,
        "sha256": spec.sha256,
        "license": spec.license,
        "verified": spec.verified,
        "mirror": spec.mirror is not None,
        "derived_from": spec.derive.source.name if spec.derive else None,
        "on_disk": local is not None,
        "path": str(local.path) if local else None,
    }


def _source(spec: ModelSpec) -> str:
    if spec.derive is not None:
        return f"{spec.derive.type} of {spec.derive.source.name}, made here"
    return "hub, mirror" if spec.mirror else "hub"


def models(json_out: Json = False) -> None:
    """List the registry's pairs, sizes, licences, whether each model is on disk, and the models
    found in Ollama's store, the Hugging Face cache and LM Studio's folder."""
    registry = load_registry()
    entries = {name: _model_entry(spec) for name, spec in registry.models.items()}
    found = found_entries()
    if json_out:
        doc = {
            "registry": registry.source,
            "default_pair": next((p.name for p in registry.pairs.values() if p.default), None),
            "pairs": [
                {
                    "name": p.name,
                    "description": p.description,
                    "default": p.default,
                    "target": p.target.name,
                    "draft": p.draft.name,
                }
                for p in registry.pairs.values()
            ],
            "models": list(entries.values()),
            "found": found,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    table = Table(title="pairs", title_justify="left")
    for col in ("pair", "target", "draft", "size", "licence", "on disk"):
        table.add_column(col)
    for p in registry.pairs.values():
        t, d = entries[p.target.name], entries[p.draft.name]
        size = p.target.size + p.draft.size if p.target.size and p.draft.size else None
        flags = {True: "yes", False: "no"}
        table.add_row(
            p.name + (" (default)" if p.default else ""),
            p.target.name,
            p.draft.name,
            gb(size),
            p.target.license
            if p.target.license == p.draft.license
            else f"{p.target.license} / {p.draft.license}",
            f"{flags[bool(t['on_disk'])]} / {flags[bool(d['on_disk'])]}",
        )
    mtable = Table(title="models", title_justify="left")
    for col in ("model", "size", "verified", "source", "path"):
        mtable.add_column(col, overflow="fold")
    for name, spec in registry.models.items():
        mtable.add_row(
            name,
            gb(spec.size),
            "yes" if spec.verified else "no",
            _source(spec),
            str(entries[name]["path"] or "-"),
        )
    print_tables(table, mtable, *([found_table(found)] if found else []))
    err.print(f"registry: {registry.source}", style="dim")
