from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tokenrace.serve.embedded import EmbeddedOptions, find_llama_server
from tokenrace.serve.launch import RunningEngine, start_embedded


def require_embedded() -> None:
    """CI installs the embedded engine (scripts/setup.sh), so there a missing binary is a failure."""
    if find_llama_server() is not None:
        return
    if os.environ.get("CI"):
        pytest.fail("llama-server is not installed; run scripts/setup.sh")
    pytest.skip("llama-server is not installed (scripts/setup.sh builds it)")


@contextmanager
def embedded_engine(**options: Any) -> Iterator[RunningEngine]:
    """The embedded engine, started for a test and stopped after it."""
    require_embedded()
    engine = asyncio.run(start_embedded(EmbeddedOptions(**options)))
    try:
        yield engine
    finally:
        engine.stop()
