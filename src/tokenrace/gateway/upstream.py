"""A lean HTTP/1.1 client for the upstream leg: keep-alive pools of asyncio protocols.

Why not aiohttp's client: the gateway's budget is well under a millisecond per request on one core,
and aiohttp's ClientSession spends a few hundred microseconds of CPU per request (measured with
benchmarks/gateway_overhead.py). The gateway needs very little of it: POST a prepared body, read a
status line and headers, then hand body bytes to the proxy as they arrive (Content-Length, chunked,
or until close). That fits in one Protocol with a small state machine, and a request costs one
`transport.write` and one future per wake-up.

Errors are `UpstreamError` with a kind: `connect` (no connection could be made) or `disconnect`
(the connection broke, or the bytes were not HTTP). A reused keep-alive connection that fails
before any response byte is retried once on a fresh connection (the server may have closed it
while it sat idle), as browsers and urllib3 do.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from typing import Literal, TypeAlias, cast
from urllib.parse import urlsplit

Kind: TypeAlias = Literal["connect", "disconnect"]
Sink: TypeAlias = Callable[[bytes], bool]  # takes body bytes; False asks to pause reading
MAX_HEAD = 64 * 1024
PAUSE_AT = 1024 * 1024  # body bytes buffered for a slow reader before upstream reading pauses
IDLE_KEEPALIVE_S = 30.0


class UpstreamError(Exception):
    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Pool:
    """Keep-alive connections to one base URL."""

    def __init__(self, base_url: str, connect_s: float | None, limit: int) -> None:
        parts = urlsplit(base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            self.host_header = f"[{self.host}]" if default_port else f"[{self.host}]:{self.port}"
        self.connect_s = connect_s
        self.limit = limit
        self._idle: list[Connection] = []
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._closed = False

    def head(self, path: str, headers: dict[str, str]) -> bytes:
        """The fixed part of a request's head for `path` (under the base path): prepare once, reuse."""
        lines = [f"POST {self.base_path}{path} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def request(self, head: bytes, extra: bytes, body: bytes) -> Response:
        """Send `head` + `extra` header lines + Content-Length + body; return once headers arrived."""
        payload = b"".join((head, extra, b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body))
        conn = self._take()
        if conn is not None:
            try:
                return await conn.send(payload)
            except UpstreamError as exc:
                if conn.got_bytes:
                    raise
                del exc  # the idle connection had been closed by the server: once more, fresh
        conn = await self._connect()
        return await conn.send(payload)

    def _take(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_s):
                _, conn = await loop.create_connection(
                    lambda: Connection(self),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
        except TimeoutError:
            raise UpstreamError("connect", f"connect timed out after {self.connect_s:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamError(
                "connect",
                f"cannot connect to {self.host_header}: {exc.strerror or exc}"
                if isinstance(exc, OSError)
                else str(exc),
            ) from None
        return conn

    def put_back(self, conn: Connection) -> None:
        if self._closed or len(self._idle) >= self.limit or not conn.usable():
            conn.abort()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.append(conn)

    def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.abort()
        self._idle.clear()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)


class Response:
    """Status, headers, and the body as it arrives (`read()`; b"" at its end)."""

    __slots__ = ("status", "headers", "_conn")

    def __init__(self, status: int, headers: dict[str, str], conn: Connection) -> None:
        self.status = status
        self.headers = headers
        self._conn = conn

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    async def read(self) -> bytes:
        """The body bytes that arrived since the last read (waits for some); b"" at the end."""
        return await self._conn.read_body()

    async def read_all(self, limit: int | None = None) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            piece = await self.read()
            if not piece:
                return b"".join(parts)
            parts.append(piece)
            size += len(piece)
            if limit is not None and size >= limit:
                self.close()
                return b"".join(parts)[:limit]

    def stream_into(self, sink: Sink) -> None:
        """From now on, hand body bytes to `sink` as they arrive, inside the protocol callback.

        No task wakes up per read: the caller waits in `wait_sink()` only for the end, an error, or
        the sink asking for a pause (it returned False: its consumer is behind).
        """
        self._conn.set_sink(sink)

    async def wait_sink(self) -> Literal["done", "paused"]:
        """Wait until the body ended ("done") or the sink asked to pause ("paused"); raises UpstreamError."""
        return await self._conn.wait_sink()

    def resume(self) -> None:
        """The sink's consumer caught up: read on."""
        self._conn.resume_sink()

    def close(self) -> None:
        """Done with the response: an unfinished connection is dropped, a finished one reused."""
        self._conn.finish()


class Connection(asyncio.Protocol):
    """One upstream connection: writes a request, parses the response as bytes come in."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.busy = False
        self.got_bytes = False
        self.idle_since = 0.0
        self._buf = b""
        self._state = "idle"  # idle | head | body | done
        self._framing = "length"  # length | chunked | close
        self._remaining = 0  # bytes left of the body (length) or of the current chunk (chunked)
        self._chunk_phase = "size"  # size | data | crlf | trailer
        self._keep_alive = True
        self._body: deque[bytes] = deque()
        self._body_size = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._head_future: asyncio.Future[Response] | None = None
        self._error: UpstreamError | None = None
        self._sink: Sink | None = None
        self._sink_paused = False

    # -- asyncio.Protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._state == "body" and self._framing == "close" and exc is None:
            self._state = "done"
            self._wake()
            return
        if self._state in ("head", "body"):
            detail = f": {exc}" if exc else ""
            where = "before the response headers" if self._state == "head" else "in the middle of the body"
            self._fail(f"the backend closed the connection {where}{detail}")

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        sink = self._sink
        if (
            sink is not None
            and self._framing == "chunked"
            and self._chunk_phase == "size"
            and not self._buf
            and self._state == "body"
        ):
            # The hot path of a stream: one whole HTTP chunk (one SSE event, as servers write them)
            # goes to the sink without the general decoder's loop.
            eol = data.find(b"\r\n")
            if 0 < eol < 9:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0
                end = eol + 2 + size
                if size and len(data) == end + 2 and data[end:] == b"\r\n":
                    if not sink(data[eol + 2 : end]):
                        self._pause_for_sink()
                    return
        if self._state == "head":
            self._buf += data
            self._parse_head()
        elif self._state == "body":
            self._feed_body(data)
        elif data.strip():
            self._fail("the backend sent bytes outside a response")
            self.abort()

    # -- one request ------------------------------------------------------------------------------------

    def usable(self) -> bool:
        return not self.lost and not self.busy and self.transport is not None and not self.transport.is_closing()

    async def send(self, payload: bytes) -> Response:
        assert self.transport is not None
        self.busy = True
        self.got_bytes = False
        self._state = "head"
        self._buf = b""
        self._body.clear()
        self._body_size = 0
        self._error = None
        self._sink = None
        self._sink_paused = False
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._head_future = fut
        self.transport.write(payload)
        try:
            return await fut
        except BaseException:
            self.abort()  # cancelled (a timeout) or failed: this connection is done for
            raise

    def _parse_head(self) -> None:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD:
                self._fail("response headers over 64 KiB")
                self.abort()
            return
        head, rest = self._buf[:end], self._buf[end + 4 :]
        self._buf = b""
        try:
            status, headers, http10 = _parse_head(head)
        except ValueError as exc:
            self._fail(f"not an HTTP response ({exc})")
            self.abort()
            return
        if 100 <= status < 200:  # an interim response (e.g. 100 Continue): the real one follows
            self._buf = rest
            self._parse_head()
            return
        self._start_body(headers, http10)
        fut = self._head_future
        self._head_future = None
        if fut is not None and not fut.done():
            fut.set_result(Response(status, headers, self))
        if rest:
            self._feed_body(rest)
        elif self._state == "body" and self._framing == "length" and self._remaining == 0:
            self._state = "done"

    def _start_body(self, headers: dict[str, str], http10: bool) -> None:
        connection = headers.get("connection", "").lower()
        self._keep_alive = not http10 and "close" not in connection
        self._state = "body"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing, self._chunk_phase = "chunked", "size"
        elif "content-length" in headers:
            self._framing = "length"
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                self._framing, self._keep_alive = "close", False
            if self._framing == "length" and self._remaining == 0:
                self._state = "done"
        else:
            self._framing, self._keep_alive = "close", False

    # -- body framing ----------------------------------------------------------------------------------

    def _feed_body(self, data: bytes) -> None:
        if self._framing == "chunked":
            self._feed_chunked(data)
        elif self._framing == "length":
            take = data[: self._remaining] if len(data) > self._remaining else data
            self._remaining -= len(take)
            self._push(take)
            if self._remaining == 0:
                self._state = "done"
                if len(data) > len(take):
                    self._keep_alive = False  # more bytes than promised: do not trust this connection
        else:
            self._push(data)
        if self._sink is None or self._state == "done":
            self._wake()  # in push mode the reader waits only for the end (or an error, or a pause)

    def _feed_chunked(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        out: list[bytes] = []
        while pos < n and self._state == "body":
            phase = self._chunk_phase
            if phase == "data":
                take = min(self._remaining, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_phase = "crlf"
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = buf[pos:eol]
            pos = eol + 2
            if phase == "size":
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self._fail("bad chunk size in the response body")
                    self.abort()
                    return
                if size == 0:
                    self._chunk_phase = "trailer"
                else:
                    self._remaining, self._chunk_phase = size, "data"
            elif phase == "crlf":
                if line:
                    self._fail("bad chunk framing in the response body")
                    self.abort()
                    return
                self._chunk_phase = "size"
            elif not line:  # the blank line that ends the trailers
                self._state = "done"
        self._buf = buf[pos:] if pos < n else b""
        if out:
            self._push(out[0] if len(out) == 1 else b"".join(out))

    def _push(self, piece: bytes) -> None:
        if not piece:
            return
        sink = self._sink
        if sink is not None:
            if not sink(piece):
                self._pause_for_sink()
            return
        self._body.append(piece)
        self._body_size += len(piece)
        if self._body_size > PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, message: str) -> None:
        self._error = UpstreamError("disconnect", message)
        fut = self._head_future
        if fut is not None and not fut.done():
            self._head_future = None
            fut.set_exception(self._error)
        self._wake()

    # -- push mode (see Response.stream_into) -----------------------------------------------------------

    def set_sink(self, sink: Sink) -> None:
        self._sink = sink
        if self._body:
            pending = self._take_body()
            if not sink(pending):
                self._pause_for_sink()

    def _pause_for_sink(self) -> None:
        if not self._sink_paused:
            self._sink_paused = True
            if self.transport is not None:
                self.transport.pause_reading()
            self._wake()

    def resume_sink(self) -> None:
        if self._sink_paused:
            self._sink_paused = False
            if self.transport is not None and not self.lost:
                self.transport.resume_reading()

    async def wait_sink(self) -> Literal["done", "paused"]:
        while True:
            if self._error is not None:
                raise self._error
            if self._state == "done":
                self.finish()
                return "done"
            if self._sink_paused:
                return "paused"
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def read_body(self) -> bytes:
        while True:
            if self._body:
                return self._take_body()
            if self._error is not None:
                raise self._error
            if self._state == "done":
                self.finish()
                return b""
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _take_body(self) -> bytes:
        body = self._body
        out = body.popleft() if len(body) == 1 else b"".join(body)
        body.clear()
        self._body_size = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return out

    def finish(self) -> None:
        """The caller is done: reuse the connection if its response ended cleanly, else drop it."""
        if not self.busy:
            return
        self.busy = False
        self._sink = None  # an idle connection must not keep the finished request's objects alive
        if self._state == "done" and self._keep_alive and self._error is None and not self._body:
            self._state = "idle"
            self.pool.put_back(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.lost = True
        self.busy = False
        if self.transport is not None:
            self.transport.abort()


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"status line {lines[0][:60]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"header line {line[:60]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return status, headers, version == "HTTP/1.0"
