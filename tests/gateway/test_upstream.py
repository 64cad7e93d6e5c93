"""The lean upstream HTTP/1.1 client against real sockets: framing, keep-alive, failures."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from tokenrace.gateway.upstream import Pool, UpstreamError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> tuple[asyncio.AbstractServer, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


def run(coro: Awaitable[None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(20):
            await coro

    asyncio.run(bounded())


async def fetch(pool: Pool, body: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    resp = await pool.request(pool.head("/chat/completions", {"Content-Type": "application/json"}), b"", body)
    data = await resp.read_all()
    resp.close()
    return resp.status, resp.headers, data


def test_content_length_chunked_and_close_delimited_bodies_in_tiny_pieces() -> None:
    bodies = {
        b"length": b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world",
        b"chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
        b"close": b"HTTP/1.0 200 OK\r\n\r\nhello world",
    }

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: one request after another on this connection
            try:
                request = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            kind = request.rsplit(b"\r\n\r\n", 1)[1]
            for i in range(len(bodies[kind])):  # one byte per write: every parser state sees a split
                writer.write(bodies[kind][i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)
            if kind == b"close":
                writer.close()
                return

    async def main() -> None:
        server, url = await serve(handler)
        pool = Pool(url, 2.0, 4)
        for kind in bodies:
            status, _, data = await fetch(pool, kind)
            assert (status, data) == (200, b"hello world"), kind
        pool.close()
        server.close()

    run(main())


def keep_alive(response: bytes, connections: list[int], seen: list[bytes]) -> Handler:
    """A server that gives `response` to each request on a connection, one after another."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while True:
            try:
                seen.append(await read_request(reader))
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(response)
            await writer.drain()

    return handler


def test_keep_alive_reuses_one_connection_and_sends_the_right_request() -> None:
    connections: list[int] = []
    seen: list[bytes] = []
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Multi: a\r\nx-multi: b\r\n\r\nok"

    async def main() -> None:
        server, url = await serve(keep_alive(ok, connections, seen))
        pool = Pool(url, 2.0, 4)
        for _ in range(5):
            status, headers, data = await fetch(pool, b'{"a": 1}')
            assert (status, data) == (200, b"ok") and headers["x-multi"] == "a, b"
        assert len(connections) == 1 and pool.idle_connections == 1
        first = seen[0].decode()
        assert first.startswith("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
        assert "Content-Length: 8\r\n" in first and first.endswith('{"a": 1}')
        pool.close()
        server.close()

    run(main())


def test_a_connection_the_server_closed_while_idle_is_replaced_transparently() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        # Keep-alive promised, then the server drops the connection right after answering.
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server, url = await serve(handler)
        pool = Pool(url, 2.0, 4)
        assert (await fetch(pool))[0] == 200
        await asyncio.sleep(0.05)
        assert (await fetch(pool))[0] == 200  # the stale connection is noticed and replaced
        pool.close()
        server.close()

    run(main())


class BehindSink:
    """A push-mode consumer that takes every piece and then asks for a pause: its client stopped reading."""

    def __init__(self) -> None:
        self.body = b""

    def __call__(self, piece: bytes) -> bool:
        self.body += piece
        return True

    def flush(self) -> bool:
        return False


def test_a_connection_paused_on_its_last_bytes_reads_the_next_response() -> None:
    connections: list[int] = []

    async def main() -> None:
        server, url = await serve(keep_alive(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", connections, []))
        pool = Pool(url, 2.0, 4)
        resp = await pool.request(pool.head("/chat/completions", {}), b"", b"{}")
        sink = BehindSink()
        resp.stream_into(sink)
        while await resp.wait_sink() == "paused":
            resp.resume()
        resp.close()
        assert sink.body == b"ok" and pool.idle_connections == 1  # complete: kept for the next request
        async with asyncio.timeout(5):  # a connection left paused would wait out the first-byte limit
            assert (await fetch(pool))[0] == 200
        assert len(connections) == 1  # on the same connection
        pool.close()
        server.close()

    run(main())


def test_connect_errors_and_broken_responses_have_kinds() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.transport.abort()

    async def main() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # bound, not listening: connection refused
        with pytest.raises(UpstreamError) as info:
            await fetch(Pool(f"http://127.0.0.1:{port}/v1", 2.0, 1))
        assert info.value.kind == "connect" and "cannot connect to 127.0.0.1" in str(info.value)
        server, url = await serve(garbage)
        with pytest.raises(UpstreamError) as info:
            await fetch(Pool(url, 2.0, 1))
        assert info.value.kind == "disconnect" and "not an HTTP response" in str(info.value)
        server.close()
        server, url = await serve(cut)
        pool = Pool(url, 2.0, 1)
        resp = await pool.request(pool.head("/x", {}), b"", b"{}")
        assert await resp.read() == b"partial"
        with pytest.raises(UpstreamError) as info:
            await resp.read()
        assert info.value.kind == "disconnect" and "in the middle of the body" in str(info.value)
        resp.close()
        assert pool.idle_connections == 0
        server.close()

    run(main())


def test_interim_100_response_is_skipped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx")
        await writer.drain()

    async def main() -> None:
        server, url = await serve(handler)
        assert await fetch(Pool(url, 2.0, 1)) == (201, {"content-length": "1"}, b"x")
        server.close()

    run(main())


def test_host_header_and_paths() -> None:
    pool = Pool("https://api.groq.com/openai/v1/", 1.0, 1)
    head = pool.head("/chat/completions", {"Authorization": "Bearer k"}).decode()
    assert head.startswith("POST /openai/v1/chat/completions HTTP/1.1\r\nHost: api.groq.com\r\n")
    assert Pool("http://[::1]:8000/v1", 1.0, 1).host_header == "[::1]:8000"


def test_idle_keep_alive_connections_are_closed_after_idle_s() -> None:
    closed: list[float] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                closed.append(asyncio.get_running_loop().time())  # the client closed its end
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def main() -> None:
        server, url = await serve(handler)
        pool = Pool(url, 2.0, 4, idle_s=0.3)
        first, second = await asyncio.gather(fetch(pool), fetch(pool))  # two connections at once
        assert first[0] == second[0] == 200 and pool.idle_connections == 2
        await asyncio.sleep(0.15)
        assert (await fetch(pool))[0] == 200  # reused: one is fresh again, the other keeps its age
        deadline = asyncio.get_running_loop().time() + 5
        while pool.idle_connections > 1 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert pool.idle_connections == 1 and len(closed) == 1  # the older one was evicted, the server saw it
        while pool.idle_connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert pool.idle_connections == 0 and len(closed) == 2
        pool.close()
        server.close()

    run(main())


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nb\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 5\r\n\r\nhello",
    ],
)
def test_malformed_responses_are_disconnects_not_bodies(response: bytes) -> None:
    """Strict chunk sizes (no `int(x, 16)` leniency: 0x5, 1_0, spaces, signs) and strict framing."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response)
        await writer.drain()

    async def main() -> None:
        server, url = await serve(handler)
        with pytest.raises(UpstreamError) as info:
            await fetch(Pool(url, 2.0, 1))
        assert info.value.kind == "disconnect" and "not an HTTP response" in str(info.value)
        server.close()

    run(main())


def test_header_tokens_match_exactly() -> None:
    """`Connection: xclose` is not `close`, and `Transfer-Encoding: xchunked` is not chunked (the body
    then runs to the close, as RFC 9112 says for a response)."""
    answers = [
        b"HTTP/1.1 200 OK\r\nConnection: xclose\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    ]
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while answers:
            try:
                await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(answers.pop(0))
            await writer.drain()
        writer.close()

    async def main() -> None:
        server, url = await serve(handler)
        pool = Pool(url, 2.0, 1)
        assert (await fetch(pool))[2] == b"ok" and pool.idle_connections == 1  # kept alive
        assert (await fetch(pool))[2] == b"2\r\nok\r\n0\r\n\r\n" and len(connections) == 1
        assert pool.idle_connections == 0  # a close-delimited body: the connection is not reused
        pool.close()
        server.close()

    run(main())
