"""Arrivals are stamped at the socket: each chunk's time is the `data_received` stamp of the bytes
that completed it, taken before aiohttp parsed them, not the later moment the reader got them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import run

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.transport import StampingHandler
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.model.records import RequestRecord


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 5, "output_tokens": 8}) as srv:
        yield srv


def test_every_chunk_is_stamped_when_its_bytes_reached_the_connection(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamps: list[int] = []
    original = StampingHandler.data_received

    def spy(self: StampingHandler, data: bytes) -> None:
        original(self, data)
        if self.rx:
            stamps.append(self.rx[-1][1])

    monkeypatch.setattr(StampingHandler, "data_received", spy)

    async def go() -> RequestRecord:
        async with OpenAIClient(server.base_url, "fake-model", options=RequestOptions(max_tokens=None)) as c:
            assert c.stamping
            return await c.send(Prompt(text="one two three"), RequestRecord(seq=0))

    rec = run(go())
    assert rec.ok, rec.error_message
    assert len(rec.chunk_ns) == 8
    # A reader-time stamp is taken after data_received returned, so it can never equal one of these.
    assert set(rec.chunk_ns) <= set(stamps)
    assert rec.first_token_ns in stamps
