from __future__ import annotations

from collections.abc import Iterator

import pytest

from tokenrace.fakes.fake_server import spawn_fake_server

# Latency grows with the requests in flight, so throughput saturates and a knee exists.
KNEE_SERVER = {"ttft_ms": 20, "itl_ms": 2, "output_tokens": 16, "load_ttft_ms": 5, "load_itl_ms": 1}


@pytest.fixture(scope="module")
def knee_server() -> Iterator[object]:
    with spawn_fake_server(KNEE_SERVER) as srv:
        yield srv
