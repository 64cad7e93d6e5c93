"""Fixtures for the fake server's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tokenrace.fakes.fake_server import FakeServerThread

from .fake_helpers import QUICK


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServerThread]:
    """A quick in-process server shared by a test module; reset before each use."""
    with FakeServerThread(QUICK) as server:
        yield server


@pytest.fixture
def srv(fake: FakeServerThread) -> FakeServerThread:
    fake.reset()
    return fake
