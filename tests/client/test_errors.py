"""One test per error kind: every failure is a record with a kind, never an exception."""

from __future__ import annotations

import asyncio as aio
import socket
import time
from typing import Any

import pytest
from tests.conftest import run

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.transport import Timeouts
from tokenrace.fakes.blackhole import blackhole
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.model.records import RequestRecord


async def _one(
    base_url: str, fake: dict[str, Any] | None = None, timeouts: Timeouts | None = None, **opts: Any
) -> RequestRecord:
    options = RequestOptions(max_tokens=None, extra_body={"fake": fake} if fake else {}, **opts)
    async with OpenAIClient(base_url, "fake-model", options=options, timeouts=timeouts) as c:
        return await c.send(Prompt(text="hi there"), RequestRecord(seq=0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_500_keeps_server_message(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "500"}))
    assert r.error_kind == "http_500" and r.status == 500 and "HTTP 500" in (r.error_message or "")


def test_429_records_retry_after(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "429"}))
    assert r.error_kind == "http_429" and r.retry_after_s == 1.0


def test_truncated_stream_keeps_tokens(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "truncate", "fault_after_chunks": 3}))
    assert r.error_kind == "truncated"
    assert len(r.chunk_ns) >= 2 and r.text


def test_disconnect_midstream_is_truncated(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "disconnect_midstream", "fault_after_chunks": 3}))
    assert r.error_kind in ("truncated", "connection_reset", "server_disconnected")
    assert r.chunk_ns


def test_malformed_line_is_recorded_and_reading_goes_on(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "malformed"}))
    assert r.error_kind == "malformed_sse"
    assert len(r.chunk_ns) == 8  # the rest of the stream was still read


def test_empty_completion(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "empty"}))
    assert r.error_kind == "empty" and r.status == 200


def test_refused_by_server_mid_request(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "refuse"}))
    assert r.error_kind in ("server_disconnected", "connection_reset")


def test_connection_refused() -> None:
    r = run(_one(f"http://127.0.0.1:{_free_port()}/v1"))
    assert r.error_kind == "connection_refused"


@pytest.mark.slow
def test_dns_failure() -> None:
    r = run(_one("http://no-such-host.invalid/v1", timeouts=Timeouts(connect=5)))
    assert r.error_kind == "dns"


def test_connect_timeout() -> None:
    with blackhole() as port:
        t = time.monotonic()
        r = run(_one(f"http://127.0.0.1:{port}/v1", timeouts=Timeouts(connect=0.3)))
        elapsed = time.monotonic() - t
    assert r.error_kind == "timeout_connect" and r.ok is False
    assert 0.25 <= elapsed < 5, elapsed  # the connect limit fired, not a later one


@pytest.mark.slow
def test_idle_timeout(fake: Any) -> None:
    r = run(_one(fake.base_url, {"fault": "stall", "stall_s": 5}, timeouts=Timeouts(idle=0.3)))
    assert r.error_kind == "timeout_idle" and r.chunk_ns


@pytest.mark.slow
def test_first_byte_timeout(fake: Any) -> None:
    r = run(_one(fake.base_url, {"ttft_ms": 3000}, timeouts=Timeouts(first_byte=0.3, idle=0.3)))
    # The role chunk arrives at once; the first *content* byte is what is late, so the idle limit
    # fires unless the server sends nothing at all.
    assert r.error_kind in ("timeout_first_byte", "timeout_idle")
    r = run(_one(fake.base_url, {"ttft_ms": 3000, "role_chunk": False}, timeouts=Timeouts(first_byte=0.3)))
    assert r.error_kind == "timeout_first_byte"


def test_total_timeout(fake: Any) -> None:
    r = run(_one(fake.base_url, {"itl_ms": 100, "output_tokens": 50}, timeouts=Timeouts(total=0.5)))
    assert r.error_kind == "timeout_total" and r.chunk_ns


@pytest.mark.parametrize("status,kind", [(401, "http_401"), (404, "http_404")])
def test_auth_and_model_errors_are_records(fake: Any, status: int, kind: str) -> None:
    if status == 401:
        with FakeServerThread({"api_key": "expected-key"}) as srv:
            r = run(_one(srv.base_url))
    else:

        async def go() -> RequestRecord:
            async with OpenAIClient(fake.base_url, "no-such-model", options=RequestOptions()) as c:
                return await c.send(Prompt(text="x"), RequestRecord(seq=0))

        r = run(go())
    assert r.error_kind == kind


def test_server_that_closes_after_each_stream_is_not_an_error() -> None:
    """llama.cpp's server closes the connection after each stream while advertising keep-alive;
    a back-to-back request on that connection is retried once on a fresh one, and says so."""

    body = b"".join(
        b"data: " + part + b"\n\n"
        for part in (b'{"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}', b"[DONE]")
    )
    chunk = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"

    async def handle(reader: aio.StreamReader, writer: aio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nKeep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunk
        )
        await writer.drain()
        writer.close()

    async def go() -> list[RequestRecord]:
        server = await aio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            async with OpenAIClient(f"http://127.0.0.1:{port}/v1", "m", options=RequestOptions(max_tokens=None)) as c:
                seq = [await c.send(Prompt(text="x"), RequestRecord(seq=i)) for i in range(5)]
                # Several dead connections in the pool at once: every request still gets through.
                for _ in range(3):
                    seq += await aio.gather(*(c.send(Prompt(text="x"), RequestRecord(seq=i)) for i in range(4)))
                return seq

    recs = run(go())
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    assert all(r.new_connection for r in recs) and any(r.retried_stale_connection for r in recs)
