from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def tokenrace_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the run history of every test in its own directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("TOKENRACE_HOME", str(home))
    return home
