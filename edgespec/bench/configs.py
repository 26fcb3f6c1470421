"""Benchmark configurations: `none,auto,auto:w=1,auto:hints=0,model:k=4,ngram:k=8,hybrid`,
and `auto:p=1`: with each prompt's file as the predicted output (`prediction_of`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgespec.errors import ConfigError
from edgespec.options import AutoSwitches, DrafterKind, DrafterSpec, parse_drafter_fields


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    drafter: DrafterKind
    k: int | None = None  # None: the drafter's default (auto chooses per round)
    width: int | None = None  # auto: the most leaves of a tree draft (1: chains only)
    switches: AutoSwitches = field(default_factory=AutoSwitches)  # auto: the features that run
    predict: bool = False  # the prompt's file as the predicted output (`p=1`)

    @property
    def spec(self) -> DrafterSpec:
        """The drafter as a generation asks for it (with auto's switches)."""
        return DrafterSpec(name=self.drafter, switches=self.switches)

    @property
    def label(self) -> str:
        options = [f"{key}={v}" for key, v in (("k", self.k), ("w", self.width)) if v is not None]
        predicted = ":p=1" if self.predict else ""
        return ":".join([self.drafter, *options]) + self.switches.label + predicted


BASELINE = BenchConfig(drafter=DrafterKind.NONE)


def parse_configs(text: str) -> list[BenchConfig]:
    """Parse a comma-separated list; the baseline `none` is always run, first. Each item is a
    drafter as `--drafter` takes it (`auto:hints=0`) with bench's own `k=N` and, for auto,
    `w=N` (its tree width), and `p=1`: the prompt's file as the predicted output."""
    configs: list[BenchConfig] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        spec, values = parse_drafter_fields(item, ("k", "w", "p"), "config")
        if "w" in values and (spec.name is not DrafterKind.AUTO or values["w"] < 1):
            raise ConfigError(f"config {item!r}: w (tree width >= 1) is auto's option")
        if values.get("p", 0) not in (0, 1) or (values.get("p") and spec.name is DrafterKind.NONE):
            raise ConfigError(f"config {item!r}: p is 0 or 1, and plain decoding drafts nothing")
        k, width = values.get("k"), values.get("w")
        if spec.name is DrafterKind.NONE:
            k = None
        config = BenchConfig(
            drafter=spec.name,
            k=k,
            width=width,
            switches=spec.switches,
            predict=bool(values.get("p")),
        )
        if config not in configs:
            configs.append(config)
    if not configs:
        raise ConfigError("no configurations given")
    if BASELINE in configs:
        configs.remove(BASELINE)
    return [BASELINE, *configs]
