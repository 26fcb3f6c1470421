"""Where edgespec keeps its files: models assembled from mirrors and calibration results."""

from __future__ import annotations

import os
from pathlib import Path

from edgespec.system import settings


def home() -> Path:
    """$EDGESPEC_HOME, else $XDG_CACHE_HOME/edgespec, else ~/.cache/edgespec."""
    chosen = settings.text(settings.HOME)
    if chosen:
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "edgespec"


def models_dir() -> Path:
    return home() / "models"


def calibration_dir() -> Path:
    return home() / "calibration"
