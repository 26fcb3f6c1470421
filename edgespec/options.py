"""The decoding options every entry point shares (CLI, Python API, bench, chat, the engine):
drafter names, the draft length K, the token budget, the RPC servers, their defaults and their
validation."""

from __future__ import annotations

from pathlib import Path

from edgespec.errors import ConfigError
from edgespec.rpc import Endpoint, parse_servers

# `auto` lets the planner choose, every round, between the draft-free and model drafters.
DRAFTERS = ("auto", "model", "ngram", "hybrid", "none")
NEEDS_DRAFT_MODEL = frozenset({"model", "hybrid"})
K_MAX = 32
# The most leaves of a tree draft (sequences the target's cache holds during a round).
TREE_WIDTH = 4
# K for the fixed drafters when none is given. A model draft is cut short by its own
# confidence (p_min), so its K is a cap; n-gram drafts cost nothing to make, only to verify.
# For `auto` K is the most it may choose in a round.
DEFAULT_K = {"auto": K_MAX, "model": 4, "ngram": 8, "hybrid": 8, "none": 0}


def check_drafter(name: str) -> str:
    if name not in DRAFTERS:
        raise ConfigError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)}")
    return name


def check_k(k: int) -> int:
    if k < 0:
        raise ConfigError(
            f"--draft-tokens must be >= 0, got {k} (K: tokens drafted a round)", field="k"
        )
    if k > K_MAX:
        # A round verifies K + 1 positions and holds K + 1 rows of the vocabulary.
        raise ConfigError(f"--draft-tokens must be <= {K_MAX}, got {k}", field="k")
    return k


def draft_length(drafter: str, k: int | None) -> int:
    """K for `drafter`: the one given (checked), else its default."""
    return DEFAULT_K[check_drafter(drafter)] if k is None else check_k(k)


def check_max_tokens(n: int) -> int:
    if n < 1:
        raise ConfigError(f"--max-tokens must be >= 1, got {n}", field="max_tokens")
    return n


def check_rpc(servers: str | None, n_gpu_layers: int | None) -> tuple[Endpoint, ...]:
    """The RPC servers of `--rpc` (none when not given); ConfigError before anything loads."""
    if servers is None:
        return ()
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
