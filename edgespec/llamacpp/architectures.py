"""Whether this llama.cpp build can load a model's architecture, told before it is loaded.

llama.cpp keeps the name of every architecture it knows (general.architecture's values) as a
string in its library, and refuses any other ("unknown model architecture"). A name that the
library does not hold, followed by its terminating NUL, is surely unknown to it; one that it
holds may still be refused, by llama.cpp itself, when the model is loaded. (Only the NUL after
the name is searched for: a linker may store a name as the tail of a longer one, "qwen2" in
"...qwen2\\0".)
"""

from __future__ import annotations

import functools
from pathlib import Path

from edgespec.errors import ModelLoadError


@functools.cache
def _library() -> bytes | None:
    """The bytes of llama.cpp's library; None where it cannot be found or read."""
    from llama_cpp import llama_cpp

    name = getattr(getattr(llama_cpp, "_lib", None), "_name", None)
    try:
        return Path(name).read_bytes() if name else None
    except OSError:
        return None


def loadable(architecture: str) -> bool:
    """False only where this llama.cpp surely cannot load models of `architecture`."""
    library = _library()
    if library is None or not architecture:
        return True
    return architecture.encode() + b"\0" in library


def check_loadable(path: Path, architecture: str) -> None:
    """ModelLoadError, naming the fix, for a file this llama.cpp cannot load."""
    if not loadable(architecture):
        from llama_cpp import __version__

        raise ModelLoadError(
            f"{path.name} is a {architecture!r} model, an architecture this llama.cpp "
            f"(llama-cpp-python {__version__}) does not know: use a model of another family, "
            "or an edgespec built on a newer llama-cpp-python"
        )
