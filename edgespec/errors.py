"""Exceptions that the CLI turns into one clear line on stderr."""

from __future__ import annotations


class EdgespecError(Exception):
    """A problem the user can act on; its message says what went wrong and what to do."""


class RegistryError(EdgespecError):
    """models.toml is malformed, or a pair/model name is unknown."""


class FetchError(EdgespecError):
    """A model could not be found, downloaded or verified."""


class IncompatibleError(EdgespecError):
    """The draft's vocabulary does not match the target's."""


class ModelLoadError(EdgespecError):
    """llama.cpp refused to load a model or to create a context."""


class ConfigError(EdgespecError):
    """An invalid option value (sampling, draft length, context size...)."""
