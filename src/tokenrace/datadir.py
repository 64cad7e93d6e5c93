"""Where tokenrace keeps what outlives a run: `$TOKENRACE_HOME`, else the platform's user data directory."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    env = os.environ.get("TOKENRACE_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("tokenrace", appauthor=False))
