"""Every fault kind, streaming and not, as a raw client sees it."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest

from tokenrace.fakes.fake_server import FakeServerThread

from .fake_helpers import Reply, chat, post


def chat_url(server: FakeServerThread) -> str:
    return f"{server.base_url}/chat/completions"


def with_fault(server: FakeServerThread, fault: str, stream: bool = True, **fake: object) -> Reply:
    return post(chat_url(server), chat(stream, fake={"fault": fault, **fake}))


def finish_reasons(reply: Reply) -> list[str]:
    return [
        c["choices"][0]["finish_reason"] for c in reply.chunks() if c["choices"] and c["choices"][0]["finish_reason"]
    ]


@pytest.mark.parametrize("stream", [True, False])
def test_500(srv: FakeServerThread, stream: bool) -> None:
    reply = with_fault(srv, "500", stream)
    assert reply.status == 500
    assert reply.json()["error"]["type"] == "server_error"
    assert srv.log()[0]["fault"] == "500"


def test_429_has_retry_after(srv: FakeServerThread) -> None:
    reply = with_fault(srv, "429")
    assert reply.status == 429
    assert reply.headers["Retry-After"] == "1"
    assert reply.json()["error"]["code"] == "rate_limit_exceeded"


def test_truncate_ends_without_done(srv: FakeServerThread) -> None:
    reply = with_fault(srv, "truncate", fault_after_chunks=3)
    assert reply.status == 200
    assert "[DONE]" not in reply.events
    assert len(reply.content_chunks()) == 3
    assert finish_reasons(reply) == []
    entry = srv.log()[0]
    assert [c["kind"] for c in entry["chunks"]] == ["role", "content", "content", "content"]


def test_malformed_line_mid_stream_then_carries_on(srv: FakeServerThread) -> None:
    reply = with_fault(srv, "malformed", fault_after_chunks=2)
    assert reply.events[3] == "{not json"  # role, 2 chunks, then the bad line
    assert len(reply.content_chunks()) == 8
    assert reply.events[-1] == "[DONE]"
    assert with_fault(srv, "malformed", stream=False).raw == b"{not json"


def test_stall_pauses_after_k_chunks(srv: FakeServerThread) -> None:
    reply = with_fault(srv, "stall", fault_after_chunks=2, stall_s=0.3)
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(reply.arrival_ns)]
    assert gaps_ms[2] >= 250  # between the 2nd content chunk and the 3rd
    assert max(gaps_ms[:2] + gaps_ms[3:]) < 250
    assert reply.events[-1] == "[DONE]"


def test_stall_delays_non_streaming_body(srv: FakeServerThread) -> None:
    with_fault(srv, "stall", stream=False, stall_s=0.2)
    entry = srv.log()[0]
    assert entry["chunks"][0]["t_ns"] - entry["arrival_ns"] >= 200_000_000


@pytest.mark.parametrize("stream", [True, False])
def test_refuse_drops_connection(srv: FakeServerThread, stream: bool) -> None:
    with pytest.raises(aiohttp.ClientConnectionError):
        with_fault(srv, "refuse", stream)
    entry = srv.log(wait_idle_s=2)[0]
    assert entry["status"] == 0 and entry["chunks"] == []


def test_disconnect_midstream_is_a_payload_error(srv: FakeServerThread) -> None:
    with pytest.raises(aiohttp.ClientPayloadError):
        with_fault(srv, "disconnect_midstream", fault_after_chunks=2)
    entry = srv.log(wait_idle_s=2)[0]
    assert [c["kind"] for c in entry["chunks"]] == ["role", "content", "content"]


def test_disconnect_non_streaming_gives_no_response(srv: FakeServerThread) -> None:
    with pytest.raises(aiohttp.ClientConnectionError):
        with_fault(srv, "disconnect_midstream", stream=False)


def test_empty_stream_and_body(srv: FakeServerThread) -> None:
    reply = post(chat_url(srv), chat(fake={"fault": "empty"}, stream_options={"include_usage": True}))
    chunks = reply.chunks()
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert reply.content_chunks() == []
    assert finish_reasons(reply) == ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] == 0
    body = with_fault(srv, "empty", stream=False).json()
    assert body["choices"][0]["message"]["content"] == ""
    assert body["usage"]["completion_tokens"] == 0


def test_client_leaving_mid_stream_is_logged(srv: FakeServerThread) -> None:
    async def leave_early() -> None:
        async with aiohttp.ClientSession() as session:
            body = chat(fake={"output_tokens": 200, "itl_ms": 5})
            async with session.post(chat_url(srv), json=body) as resp:
                await resp.content.readline()
                resp.close()  # drop the connection after the first event

    asyncio.run(leave_early())
    entry = srv.log(wait_idle_s=5)[0]
    assert entry["error"].startswith("client disconnected")
    assert srv.stats()["in_flight"] == 0
    assert sum(c["tokens"] for c in entry["chunks"]) < 200


def test_header_fault(srv: FakeServerThread) -> None:
    assert post(chat_url(srv), chat(), headers={"x-fake-fault": "429"}).status == 429
    assert post(chat_url(srv), chat(), headers={"x-fake-fault": "bogus"}).status == 400
    assert post(chat_url(srv), chat()).status == 200


def test_server_wide_fault_every() -> None:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "fault": "500", "fault_every": 3}) as server:
        statuses = [post(chat_url(server), chat(False)).status for _ in range(6)]
        assert statuses == [200, 200, 500, 200, 200, 500]
        # A request may switch the server's fault off for itself.
        switched_off = [post(chat_url(server), chat(False, fake={"fault": None})).status for _ in range(3)]
        assert switched_off == [200, 200, 200]
