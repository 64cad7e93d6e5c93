from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenrace.testing.fake_server import FakeServerThread, spawn_fake_server

# Latency grows with the requests in flight, so throughput saturates and a knee exists.
KNEE_SERVER = {"ttft_ms": 20, "itl_ms": 2, "output_tokens": 16, "load_ttft_ms": 5, "load_itl_ms": 1}


@pytest.fixture(autouse=True)
def tokenrace_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the run history of every test in its own directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("TOKENRACE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def knee_server() -> Iterator[object]:
    with spawn_fake_server(KNEE_SERVER) as srv:
        yield srv


@pytest.fixture
def quick_server() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        yield srv
