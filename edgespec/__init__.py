"""edgespec: lossless speculative decoding on llama.cpp, tuned to the device it runs on.

Importing the package loads nothing heavy: llama.cpp is imported when a model is loaded.
The names in `__all__` are the public Python API (the tools under benchmarks/ use only these
and the `edgespec` command); each is imported when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgespec.version import __version__

__all__ = [
    "BUILTIN_SUITES",
    "K_MAX",
    "BenchPrompt",
    "DoneEvent",
    "GenerationConfig",
    "GenerationStats",
    "Grammar",
    "RoundEvent",
    "SamplingParams",
    "Speculator",
    "TokenEvent",
    "__version__",
    "load_suite",
]

if TYPE_CHECKING:
    from edgespec.api import Speculator
    from edgespec.bench.suites import BUILTIN as BUILTIN_SUITES
    from edgespec.bench.suites import BenchPrompt, load_suite
    from edgespec.engine.events import DoneEvent, GenerationStats, RoundEvent, TokenEvent
    from edgespec.engine.generate import GenerationConfig
    from edgespec.engine.sampling import SamplingParams
    from edgespec.options import K_MAX
    from edgespec.text.grammar import Grammar

# What `Speculator.stream` yields, and the stats its DoneEvent carries.
_EVENTS = ("DoneEvent", "GenerationStats", "RoundEvent", "TokenEvent")


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
    if name in _EVENTS:
        from edgespec.engine import events

        return getattr(events, name)
    if name == "K_MAX":  # the most tokens a round drafts (`--draft-tokens` is checked against it)
        from edgespec.options import K_MAX

        return K_MAX
    if name in ("BUILTIN_SUITES", "BenchPrompt", "load_suite"):  # `edgespec bench`'s prompts
        from edgespec.bench import suites

        return suites.BUILTIN if name == "BUILTIN_SUITES" else getattr(suites, name)
    raise AttributeError(name)
