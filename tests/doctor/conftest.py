from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from .scenarios import FIXTURES


@pytest.fixture
def copy_scenario(tmp_path: Path) -> Callable[[str], Path]:
    """A writable copy of a recorded scenario, to break one thing in it."""

    def make(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(FIXTURES / name, target)
        return target

    return make
