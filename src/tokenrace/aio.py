"""The event loop every tokenrace process runs on: uvloop, else asyncio's own.

uvloop costs less per request and keeps timing steadier (docs/design.md, Measuring). It is a
dependency everywhere but Windows, where asyncio's loop is used instead. The bench and sweep
commands, the worker processes, the fake server and the benchmarks all start their loops here, so
they agree on which loop measured a run (`LOOP` is recorded by calibration).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # Windows: uvloop is not installed there (pyproject.toml)
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")

LOOP = "asyncio" if uvloop is None else "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new event loop: `asyncio.Runner(loop_factory=loop_factory())`."""
    return asyncio.new_event_loop if uvloop is None else uvloop.new_event_loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)` on the loop above."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)
