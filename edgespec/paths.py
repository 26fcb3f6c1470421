"""Where edgespec keeps its files: models assembled from mirrors and calibration results."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "EDGESPEC_HOME"


def home() -> Path:
    """$EDGESPEC_HOME, else $XDG_CACHE_HOME/edgespec, else ~/.cache/edgespec."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "edgespec"


def models_dir() -> Path:
    return home() / "models"


def calibration_dir() -> Path:
    return home() / "calibration"
