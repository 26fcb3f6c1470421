"""`edgespec models`' second half: the GGUF files found where users keep models (Ollama, the
Hugging Face cache, LM Studio, edgespec's store), each with what its header says."""

from __future__ import annotations

from rich.table import Table

from edgespec.cli.console import gb
from edgespec.models.stores import found_models
from edgespec.models.summary import Index


def found_entries() -> list[dict[str, object]]:
    """One entry per model file found: how to name it, where it is, its family, size and
    quantization (from its GGUF header; None where the file cannot be read as one)."""
    index = Index()
    entries: list[dict[str, object]] = []
    try:
        for found in found_models():
            s = index.summary(found.path)
            entries.append(
                {
                    "spec": found.spec,
                    "store": found.store,
                    "path": str(found.path),
                    "architecture": s.architecture if s else None,
                    "basename": s.basename if s else None,
                    "size_label": s.size_label if s else None,
                    "bytes": s.file_bytes if s else None,
                    "quantization": s.quantization if s else None,
                }
            )
    finally:
        index.save()
    return entries


def found_table(entries: list[dict[str, object]]) -> Table:
    table = Table(title="found on this machine", title_justify="left")
    for col in ("model", "store", "family", "size", "quantization"):
        table.add_column(col, overflow="fold")
    for e in entries:
        family = " / ".join(str(e[k]) for k in ("architecture", "basename") if e[k])
        nbytes = e["bytes"] if isinstance(e["bytes"], int) else None
        size = f"{e['size_label']} ({gb(nbytes)})" if e["size_label"] else gb(nbytes)
        table.add_row(
            str(e["spec"]),
            str(e["store"]),
            family or "not a readable GGUF file",
            size,
            str(e["quantization"] or "-"),
        )
    return table
