"""Where tokenrace keeps its own files: the history database, prices, calibration, cached model copies.

A leaf module, so that every layer can find the data directory without importing the layer that
owns a particular file.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """`$TOKENRACE_HOME`, else the platform's user data directory."""
    env = os.environ.get("TOKENRACE_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs  # noqa: PLC0415 - import cost: every module imports paths; platformdirs only without $TOKENRACE_HOME

    return Path(platformdirs.user_data_dir("tokenrace", appauthor=False))
