from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tokenrace.testing.fake_server import FakeServerThread


@pytest.fixture
def fake() -> Iterator[FakeServerThread]:
    """A fake OpenAI server in a background thread (quick, for behaviour, not for timing)."""
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8}) as srv:
        yield srv


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)
