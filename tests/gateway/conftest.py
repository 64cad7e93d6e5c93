"""Fixtures for the gateway tests: fake OpenAI servers in threads and a gateway factory."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.gateway import clock

from .helpers import GatewayThread, SteppedClock, config_text, spawn_gateway

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


@pytest.fixture
def gateway_clock() -> Iterator[SteppedClock]:
    """The clock of the gateways in this process (GatewayThread), moved forward by the test."""
    stepped = SteppedClock()
    previous = clock.use(stepped)
    yield stepped
    clock.use(previous)


def require_redis_server() -> str:
    """Shared state (and several workers, through a private one) needs a real redis-server."""
    return require("redis-server", shutil.which("redis-server"), "apt-get install -y redis-server")


class GatewayProcess:
    """`tokenrace gateway --workers N` as a child process, with GatewayThread's url and base_url."""

    def __init__(self, path: Path, workers: int) -> None:
        self.proc, self.url = spawn_gateway(path, workers=workers)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)  # the supervisor itself kills a worker still draining after drain_s + 10 s
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# The two-worker case starts the real processes: it belongs to the full suite, not the fast tier.
@pytest.fixture(params=[1, pytest.param(2, marks=pytest.mark.slow)], ids=["one-process", "two-workers"])
def any_gateway(
    request: pytest.FixtureRequest, tmp_path: Path, gateway: Callable[..., GatewayThread]
) -> Iterator[Callable[..., GatewayThread | GatewayProcess]]:
    """gateway(), and the same as two worker processes on one port: for tests that go through
    HTTP only (/v1, /metrics, /admin/state), which must hold whichever worker answers."""
    if request.param == 1:
        yield gateway
        return
    require_redis_server()
    started: list[GatewayProcess] = []

    def make(backends: dict[str, Any], routes: list[dict[str, Any]], **extra: Any) -> GatewayProcess:
        path = tmp_path / f"gateway-{len(started)}.yaml"
        path.write_text(config_text(backends, routes, **extra))
        started.append(GatewayProcess(path, request.param))
        return started[-1]

    yield make
    for gw in started:
        gw.stop()
