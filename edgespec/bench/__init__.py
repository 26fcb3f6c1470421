"""`edgespec bench`: interleaved A/B runs of drafter configurations, with a losslessness check.

The names below are this package's face, for the CLI.
"""

from edgespec.bench.configs import BenchConfig, parse_configs
from edgespec.bench.runner import BenchResult, run_bench
from edgespec.bench.suites import BUILTIN, BenchPrompt, load_suite

__all__ = [
    "BUILTIN",
    "BenchConfig",
    "BenchPrompt",
    "BenchResult",
    "load_suite",
    "parse_configs",
    "run_bench",
]
