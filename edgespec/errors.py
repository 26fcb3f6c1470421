"""Exceptions that the CLI turns into one clear line on stderr."""

from __future__ import annotations


class EdgespecError(Exception):
    """A problem the user can act on; its message says what went wrong and what to do."""


class RegistryError(EdgespecError):
    """models.toml is malformed, or a pair/model name is unknown."""


class FetchError(EdgespecError):
    """A model could not be found, downloaded or verified."""


class VerifyError(FetchError):
    """A file's size or sha256 is not the registry's: its content is wrong, wherever it came
    from."""


class IncompatibleError(EdgespecError):
    """The draft's vocabulary does not match the target's."""


class ModelLoadError(EdgespecError):
    """llama.cpp refused to load a model or to create a context."""


class ConfigError(EdgespecError):
    """An invalid option value (sampling, draft length, context size...).

    `field`: the option at fault, named as `DecodeOptions`, `SamplingParams` and the Python API
    name it (`k`, `max_tokens`, `top_p`...) or as the environment variable, when one is; a
    front end (the server's error body) reads it here, never from the message."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
