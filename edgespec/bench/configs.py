"""Benchmark configurations: `none,auto,auto:w=1,model:k=4,ngram:k=8,hybrid`."""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import ConfigError
from edgespec.options import check_drafter


@dataclass(frozen=True)
class BenchConfig:
    drafter: str
    k: int | None = None  # None: the drafter's default (auto chooses per round)
    width: int | None = None  # auto: the most leaves of a tree draft (1: chains only)

    @property
    def label(self) -> str:
        options = [f"{key}={v}" for key, v in (("k", self.k), ("w", self.width)) if v is not None]
        return ":".join([self.drafter, *options])


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
        values: dict[str, int] = {}
        for option in filter(None, options.split(":")):
            key, _, value = option.partition("=")
            if key not in ("k", "w") or not value.isdigit() or key in values:
                raise ConfigError(f"unknown config {item!r}: options look like {name}:k=4")
            values[key] = int(value)
        if "w" in values and (name != "auto" or values["w"] < 1):
            raise ConfigError(f"unknown config {item!r}: w (tree width >= 1) is auto's option")
        k, width = values.get("k"), values.get("w")
        if name == "none":
            k = None
        config = BenchConfig(name, k, width)
        if config not in configs:
            configs.append(config)
    if not configs:
        raise ConfigError("no configurations given")
    if BASELINE in configs:
        configs.remove(BASELINE)
    return [BASELINE, *configs]
