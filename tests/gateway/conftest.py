"""Fixtures for the gateway tests: fake OpenAI servers in threads and a gateway factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tokenrace.testing.fake_server import FakeServerThread

from .helpers import GatewayThread, config_text

FAST = {"ttft_ms": 5, "itl_ms": 1, "output_tokens": 8, "models": ["m"]}


@pytest.fixture(scope="module")
def fake_a() -> Iterator[FakeServerThread]:
    with FakeServerThread(FAST) as srv:
        yield srv


@pytest.fixture(scope="module")
def fake_b() -> Iterator[FakeServerThread]:
    with FakeServerThread(FAST) as srv:
        yield srv


@pytest.fixture
def fakes(fake_a: FakeServerThread, fake_b: FakeServerThread) -> tuple[FakeServerThread, FakeServerThread]:
    fake_a.reset()
    fake_b.reset()
    return fake_a, fake_b


@pytest.fixture
def gateway() -> Iterator[Callable[..., GatewayThread]]:
    """gateway(backends, routes, **extra) -> a started GatewayThread, stopped after the test."""
    started: list[GatewayThread] = []

    def make(backends: dict[str, Any], routes: list[dict[str, Any]], **extra: Any) -> GatewayThread:
        gw = GatewayThread(config_text(backends, routes, **extra)).__enter__()
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()
