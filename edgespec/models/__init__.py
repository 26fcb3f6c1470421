"""Which GGUF files, where, and can they speculate together: the registry (models.toml), what
the user typed resolved to files, fetching into the local store, GGUF metadata, compatibility.

The names below are this package's face; the CLI and the API use these, not the modules.
"""

from edgespec.models.compat import check_compatible
from edgespec.models.files import Progress
from edgespec.models.gguf import read_gguf
from edgespec.models.registry import ModelSpec, load_registry
from edgespec.models.resolve import ModelRef, find_local, model_ref

__all__ = [
    "ModelRef",
    "ModelSpec",
    "Progress",
    "check_compatible",
    "find_local",
    "load_registry",
    "model_ref",
    "read_gguf",
]
