"""What the user asked for (`DecodeOptions`), checked where it is built: the drafter, K,
`--rpc` and `--memory`, before anything is fetched or loaded."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from edgespec.errors import ConfigError
from edgespec.llamacpp.rpc_servers import Endpoint, parse_servers
from edgespec.options import (
    NEEDS_DRAFT_MODEL,
    DrafterKind,
    DrafterSpec,
    draft_length,
    parse_drafter,
)


def check_rpc(servers: str | None, n_gpu_layers: int | None) -> tuple[Endpoint, ...]:
    """The RPC servers of `--rpc` (none when not given); ConfigError before anything loads."""
    if servers is None:
        return ()
    if sys.platform == "win32":
        # The target's child process reads its logits from a file mapping it inherits by
        # descriptor (llamacpp/rpc_target.py), which Windows' process creation does not hand on.
        raise ConfigError(
            "--rpc does not run on Windows yet; use it from macOS or Linux", field="rpc"
        )
    endpoints = parse_servers(servers)
    if n_gpu_layers == 0:
        raise ConfigError(
            "--rpc puts the target's layers on the RPC servers and --gpu-layers 0 keeps them all "
            "here: drop one of the two",
            field="rpc",
        )
    return endpoints


def check_memory(folder: str | None) -> None:
    """`--memory` names a folder (made when missing), never a file."""
    if folder is not None and Path(folder).expanduser().is_file():
        raise ConfigError(f"--memory {folder} is a file; give a folder", field="memory")


@dataclass(frozen=True, kw_only=True)
class DecodeOptions:
    """What the user asked for; None leaves the choice to the planner."""

    pair: str | None = None
    target: str | None = None  # registry name or .gguf path (overrides the pair's)
    draft: str | None = None
    drafter: str | DrafterSpec = DrafterKind.AUTO  # a name, with auto's switches (`auto:model=0`)
    k: int | None = None  # fixed K, or with `auto` the most it may choose; None: the default
    n_ctx: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    keep_draft: bool = False  # load the draft model even where the drafter does not need it
    offline: bool = False
    recalibrate: bool = False
    calibrate_later: bool = False  # uncached: guess the costs, measure after the answer
    rpc: str | None = None  # HOST:PORT[@MEM][,...]: llama.cpp RPC servers for the target
    memory: str | None = None  # a folder of past generations for auto's suffix drafts
    parallel: int | None = 1  # a server's slots; None: as many as fit (up to 4)
    yes: bool = False  # pull the registry's draft found for a --target alone without asking

    # `--rpc` and the drafter, parsed
    servers: tuple[Endpoint, ...] = field(init=False, repr=False, compare=False)
    drafter_spec: DrafterSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """The one place the options are checked (and K defaulted), before anything loads."""
        object.__setattr__(self, "servers", check_rpc(self.rpc, self.n_gpu_layers))
        check_memory(self.memory)
        object.__setattr__(self, "drafter_spec", parse_drafter(self.drafter))
        object.__setattr__(self, "k", draft_length(self.drafter_spec, self.k))
        if self.parallel is not None and self.parallel < 1:
            raise ConfigError(f"--parallel must be >= 1, got {self.parallel}", field="parallel")

    @property
    def drafter_name(self) -> DrafterKind:
        """The drafter without its switches: `auto` for `auto:hints=0`."""
        return self.drafter_spec.name

    @property
    def needs_draft_model(self) -> bool:
        return self.drafter_name in NEEDS_DRAFT_MODEL

    @property
    def wants_draft(self) -> bool:
        """Whether the draft file is worth finding: a drafter may use it."""
        auto = self.drafter_name is DrafterKind.AUTO
        return self.needs_draft_model or auto or self.keep_draft
