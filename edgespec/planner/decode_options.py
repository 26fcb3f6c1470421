"""Which models the user asked for and how they load (`DecodeOptions`), checked where it is
built: `--rpc` and `--memory`, before anything is fetched or loaded."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from edgespec.errors import ConfigError
from edgespec.llamacpp.rpc_servers import Endpoint, parse_servers
from edgespec.options import DrafterKind, DrafterSpec, Drafting


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
    """Which models, and how they load and calibrate; None leaves the choice to the planner.
    How they draft is a `Drafting`, `make_plan`'s second argument."""

    pair: str | None = None
    target: str | None = None  # registry name or .gguf path (overrides the pair's)
    draft: str | None = None
    n_ctx: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    offline: bool = False
    recalibrate: bool = False
    calibrate_later: bool = False  # uncached: guess the costs, measure after the answer
    rpc: str | None = None  # HOST:PORT[@MEM][,...]: llama.cpp RPC servers for the target
    memory: str | None = None  # a folder of past generations for auto's suffix drafts
    parallel: int | None = 1  # a server's slots; None: as many as fit (up to 4)
    yes: bool = False  # pull the registry's draft found for a --target alone without asking
    # Deprecated: give these to `make_plan` as a `Drafting`.
    drafter: str | DrafterSpec | None = None
    k: int | None = None
    keep_draft: bool | None = None

    servers: tuple[Endpoint, ...] = field(init=False, repr=False, compare=False)  # `--rpc`'s
    # What the deprecated fields ask for (None: none of them is given).
    drafting: Drafting | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """The one place the options are checked, before anything loads."""
        object.__setattr__(self, "servers", check_rpc(self.rpc, self.n_gpu_layers))
        check_memory(self.memory)
        legacy = None
        if (self.drafter, self.k, self.keep_draft) != (None, None, None):
            warnings.warn(
                "DecodeOptions(drafter=, k=, keep_draft=) is deprecated: pass "
                "make_plan(options, Drafting.of(drafter, k, keep_draft=...))",
                DeprecationWarning,
                stacklevel=3,
            )
            drafter = self.drafter or DrafterKind.AUTO
            legacy = Drafting.of(drafter, self.k, keep_draft=bool(self.keep_draft))
        object.__setattr__(self, "drafting", legacy)
        if self.parallel is not None and self.parallel < 1:
            raise ConfigError(f"--parallel must be >= 1, got {self.parallel}", field="parallel")
