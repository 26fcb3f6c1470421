"""edgespec: lossless speculative decoding on llama.cpp, tuned to the device it runs on.

Importing the package loads nothing heavy: llama.cpp is imported when a model is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgespec.version import __version__

__all__ = ["GenerationConfig", "Grammar", "SamplingParams", "Speculator", "__version__"]

if TYPE_CHECKING:
    from edgespec.api import Speculator
    from edgespec.engine.generate import GenerationConfig
    from edgespec.engine.sampling import SamplingParams
    from edgespec.text.grammar import Grammar


def __getattr__(name: str) -> Any:
    if name == "Speculator":
        from edgespec.api import Speculator

        return Speculator
    if name == "GenerationConfig":
        from edgespec.engine.generate import GenerationConfig

        return GenerationConfig
    if name == "SamplingParams":
        from edgespec.engine.sampling import SamplingParams

        return SamplingParams
    if name == "Grammar":
        from edgespec.text.grammar import Grammar

        return Grammar
    raise AttributeError(name)
