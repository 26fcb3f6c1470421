"""Which GGUF files, where, and can they speculate together: the registry (models.toml), what
the user typed resolved to files, fetching into the local store, GGUF metadata, compatibility.
The names below are its face for the commands."""

from edgespec.models.compat import check_compatible
from edgespec.models.gguf import read_gguf
from edgespec.models.registry import ModelSpec, load_registry
from edgespec.models.resolve import ModelRef, find_local, model_ref

__all__ = [
    "ModelRef",
    "ModelSpec",
    "check_compatible",
    "find_local",
    "load_registry",
    "model_ref",
    "read_gguf",
]
