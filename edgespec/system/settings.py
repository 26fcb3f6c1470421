"""Every EDGESPEC_* environment variable, read when used (never at import);
docs/configuration.md tells users what each does."""

from __future__ import annotations

import os

from edgespec.errors import ConfigError

HOME = "EDGESPEC_HOME"  # edgespec's store (paths.home)
REGISTRY = "EDGESPEC_REGISTRY"  # a models.toml instead of the shipped one
DEBUG = "EDGESPEC_DEBUG"  # 1: tracebacks and llama.cpp's log
API_KEY = "EDGESPEC_API_KEY"  # serve's --api-key (read by the CLI's option)
HUGE_PAGES = "EDGESPEC_HUGE_PAGES"  # 1: the weights on transparent huge pages
FLASH_ATTN = "EDGESPEC_FLASH_ATTN"  # 1 or 0: llama.cpp's flash attention on or off


def text(name: str) -> str | None:
    """A variable's value; None when it is unset or empty."""
    return os.environ.get(name) or None


def switch(name: str) -> bool | None:
    """An on/off setting: 1, 0, or unset (None); anything else is refused."""
    value = os.environ.get(name, "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"{name} must be 0 or 1, not {value!r}", field=name)
    return None if value == "" else value == "1"


def debug() -> bool:
    """EDGESPEC_DEBUG=1: errors show their traceback; any other value is off."""
    return os.environ.get(DEBUG) == "1"


def huge_pages() -> bool:
    return switch(HUGE_PAGES) is True


def flash_attn() -> bool | None:
    """Flash attention as asked (None: the planner's default for where the models run)."""
    return switch(FLASH_ATTN)
