"""Benchmark configurations: `none,auto,model:k=4,ngram:k=8,hybrid`."""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import ConfigError
from edgespec.options import check_drafter


@dataclass(frozen=True)
class BenchConfig:
    drafter: str
    k: int | None = None  # None: the drafter's default (auto chooses per round)

    @property
    def label(self) -> str:
        return self.drafter if self.k is None else f"{self.drafter}:k={self.k}"


BASELINE = BenchConfig("none")


def parse_configs(text: str) -> list[BenchConfig]:
    """Parse a comma-separated list; the baseline `none` is always run, first."""
    configs: list[BenchConfig] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, options = item.partition(":")
        try:
            check_drafter(name)
        except ConfigError as exc:
            raise ConfigError(f"unknown config {item!r}: {exc}") from None
        k = None
        if options:
            key, _, value = options.partition("=")
            if key != "k" or not value.isdigit():
                raise ConfigError(f"unknown config {item!r}: options look like {name}:k=4")
            k = int(value)
        if name == "none":
            k = None
        config = BenchConfig(name, k)
        if config not in configs:
            configs.append(config)
    if not configs:
        raise ConfigError("no configurations given")
    if BASELINE in configs:
        configs.remove(BASELINE)
    return [BASELINE, *configs]
