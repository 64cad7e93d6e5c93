"""In-memory stand-ins for the sockets on both sides of the request path, for unit tests.

`MemoryUpstream` implements `upstream.Upstream`: each request takes the next scripted `Answer`
(status, headers, body pieces, or an error) and records what was sent. Its responses hand body
pieces to a push-mode sink one per loop turn, so a sink asking for a pause really stops the flow.
`MemoryClient` is the client's side of a connection: it keeps what the gateway wrote, and its
`hold()` / `release()` make it a slow reader (the transport pauses the writer's flow control).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httptools

from tokenrace.gateway import http
from tokenrace.gateway.upstream import Sink, UpstreamError


@dataclass
class Answer:
    """One scripted backend answer. `fail_after`: raise a disconnect after that many body pieces."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    pieces: list[bytes] = field(default_factory=list)
    fail_after: int | None = None
    refuse: UpstreamError | None = None  # raised by request() itself: a connect error, say
    stall: bool = False  # after the pieces, send nothing more and never end


@dataclass
class Sent:
    """What the gateway sent: the prepared head, the per-request header lines, the body."""

    head: bytes
    extra: bytes
    body: bytes

    def headers(self) -> dict[str, str]:
        """The request's header fields, lower-case names (parsed as the backend would)."""
        raw = self.head + self.extra + b"Content-Length: %d\r\n\r\n" % len(self.body) + self.body
        found: dict[str, str] = {}

        class _Collect:
            def on_header(self, name: bytes, value: bytes) -> None:
                found[name.decode("latin-1").lower()] = value.decode("latin-1")

        httptools.HttpRequestParser(_Collect()).feed_data(raw)
        return found


class MemoryResponse:
    """One scripted response (the `upstream.UpstreamResponse` protocol)."""

    def __init__(self, answer: Answer) -> None:
        self.status = answer.status
        self.headers = answer.headers
        self._pieces = deque(answer.pieces)
        self._fail_after = answer.fail_after
        self._stall = answer.stall
        self._given = 0
        self._sink: Sink | None = None
        self.paused = False
        self.pauses = 0  # how many times the sink asked to pause
        self.closed = False
        self._changed: asyncio.Event = asyncio.Event()

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    def _next(self) -> bytes:
        if self._fail_after is not None and self._given >= self._fail_after:
            raise UpstreamError("disconnect", "the scripted backend dropped the connection")
        if not self._pieces:
            return b""
        self._given += 1
        return self._pieces.popleft()

    async def read(self) -> bytes:
        await asyncio.sleep(0)  # one loop turn per piece, as a socket read would take
        if self._stall and not self._pieces:
            await asyncio.Event().wait()  # a backend that went quiet: only a timeout ends this
        return self._next()

    async def read_all(self, limit: int | None = None) -> bytes:
        parts = []
        while piece := await self.read():
            parts.append(piece)
        body = b"".join(parts)
        return body if limit is None else body[:limit]

    def stream_into(self, sink: Sink) -> None:
        self._sink = sink
        asyncio.get_running_loop().call_soon(self._push)

    def _push(self) -> None:
        if self._sink is None or self.paused or self.closed:
            return
        try:
            piece = self._next()
        except UpstreamError:
            self._changed.set()
            return
        if not piece:
            self._changed.set()
            return
        took = self._sink(piece)
        flushed = self._sink.flush()  # one piece per read
        if not (took and flushed):
            self.paused = True
            self.pauses += 1
            self._changed.set()
            return
        asyncio.get_running_loop().call_soon(self._push)

    async def wait_sink(self) -> Literal["done", "paused"]:
        while True:
            if self._fail_after is not None and self._given >= self._fail_after:
                raise UpstreamError("disconnect", "the scripted backend dropped the connection")
            if not self._pieces and not self._stall:
                return "done"
            if self.paused:
                return "paused"
            self._changed.clear()
            await self._changed.wait()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            asyncio.get_running_loop().call_soon(self._push)

    @property
    def left(self) -> int:
        """Body pieces not taken yet."""
        return len(self._pieces)

    def close(self) -> None:
        self.closed = True


class MemoryUpstream:
    """A backend in memory (the `upstream.Upstream` protocol): scripted answers, recorded requests."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = deque(answers)
        self.sent: list[Sent] = []
        self.responses: list[MemoryResponse] = []

    def head(self, path: str, headers: dict[str, str]) -> bytes:
        lines = [f"POST /v1{path} HTTP/1.1", "Host: memory", *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def request(self, head: bytes, extra: bytes, body: bytes) -> MemoryResponse:
        self.sent.append(Sent(head, extra, body))
        answer = self.answers.popleft() if self.answers else Answer(503, pieces=[b'{"error": "no answer scripted"}'])
        if answer.refuse is not None:
            raise answer.refuse
        response = MemoryResponse(answer)
        self.responses.append(response)
        return response

    def close(self) -> None:
        pass


class MemoryTransport:
    """The client's end of a connection: keeps what was written; `hold()` makes it a slow reader."""

    def __init__(self, protocol: http.Connection, high: int = http.WRITE_HIGH, low: int = http.WRITE_LOW) -> None:
        self.protocol = protocol
        self.written = bytearray()
        self.buffered = 0  # bytes "in the socket buffer" while the reader holds
        self.holding = False
        self.closing = False
        self.aborted = False
        self.high, self.low = high, low
        self._paused = False

    # -- what the server side calls ------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        self.written += data
        if self.holding:
            self.buffered += len(data)
            if self.buffered > self.high and not self._paused:
                self._paused = True
                self.protocol.pause_writing()

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.aborted = True
        self._lose()

    def close(self) -> None:
        self._lose()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    # -- what the test does --------------------------------------------------------------------------

    def hold(self) -> None:
        """Stop reading: what is written from now on stays buffered."""
        self.holding = True

    def release(self) -> None:
        """Read everything buffered: the writer may go on."""
        self.holding = False
        self.buffered = 0
        if self._paused:
            self._paused = False
            self.protocol.resume_writing()

    def leave(self) -> None:
        """The client closes its connection."""
        self._lose()

    def _lose(self) -> None:
        if not self.closing:
            self.closing = True
            self.protocol.connection_lost(None)


class _Limits:
    max_body_bytes = 4 * 1024 * 1024
    client_idle_s = 75.0
    client_body_s = 30.0


async def _no_handler(request: http.Request) -> http.Reply:
    return http.Reply(500)


def client_request(
    body: bytes, headers: dict[str, str] | None = None, path: str = "/v1/chat/completions"
) -> tuple[http.Request, MemoryTransport]:
    """A parsed request on an in-memory client connection, as the server would hand it over."""
    server = http.Server(_no_handler, lambda: _Limits())
    conn = http.Connection(server)
    transport = MemoryTransport(conn)
    conn.connection_made(cast(asyncio.Transport, transport))
    conn._disarm()  # no idle timer: nothing is read from this connection
    lower = {k.lower(): v for k, v in (headers or {}).items()}
    request = http.Request("POST", path, "", (1, 1), {"host": "gateway", **lower}, conn)
    request.body = body
    return request, transport
