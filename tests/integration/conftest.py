from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.conftest import require

from tokenrace.serve.embedded import EmbeddedOptions, find_llama_server
from tokenrace.serve.launch import RunningEngine, start_embedded


def require_embedded() -> None:
    """The embedded engine (llama-server): a failure under CI, which builds it, else a skip."""
    require("llama-server", find_llama_server(), "scripts/setup.sh builds it")


@contextmanager
def embedded_engine(**options: Any) -> Iterator[RunningEngine]:
    """The embedded engine, started for a test and stopped after it."""
    require_embedded()
    engine = asyncio.run(start_embedded(EmbeddedOptions(**options)))
    try:
        yield engine
    finally:
        engine.stop()
