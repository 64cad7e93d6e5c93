"""A lean HTTP/1.1 client for the upstream leg: keep-alive pools of asyncio protocols.

Why not aiohttp's client: the gateway's budget is well under a millisecond per request on one core,
and aiohttp's ClientSession spends a few hundred microseconds of CPU per request (measured with
benchmarks/gateway_overhead.py). The gateway needs very little of it: POST a prepared body, read a
status line and headers, then hand body bytes to the proxy as they arrive (Content-Length, chunked,
or until close). That fits in one Protocol; httptools' `HttpResponseParser` (llhttp, strict) reads
the responses, and a request costs one `transport.write` and one future per wake-up.

Errors are `UpstreamError` with a kind: `connect` (no connection could be made) or `disconnect`
(the connection broke, or the bytes were not HTTP). A reused keep-alive connection that fails
before any response byte is retried once on a fresh connection (the server may have closed it
while it sat idle), as browsers and urllib3 do. A connection idle for `IDLE_KEEPALIVE_S` is closed:
servers close theirs after a while too (uvicorn after 5 s, nginx 75 s), and one kept longer only
holds a socket at both ends.

https:// backends are verified (certificate chain and host name) against the system's CAs, or only
against a CA bundle file when the backend names one. A backend that is not on this machine goes
through the proxy that `HTTPS_PROXY` / `HTTP_PROXY` name (lower-case names first, as curl reads
them) unless `NO_PROXY` exempts it: https through a CONNECT tunnel, http as absolute-form requests.
Loopback backends never go through a proxy.

The request path sees this module through two protocols, `Upstream` (a `Pool`) and
`UpstreamResponse` (a `Response`), so a test can put an in-memory backend in its place.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import ssl
from collections import deque
from collections.abc import Mapping
from typing import Literal, Protocol, TypeAlias, cast
from urllib.parse import SplitResult, unquote, urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # stdlib, not in typeshed

import httptools

Kind: TypeAlias = Literal["connect", "disconnect"]
MAX_HEAD = 64 * 1024
PAUSE_AT = 1024 * 1024  # body bytes buffered for a slow reader before upstream reading pauses
IDLE_KEEPALIVE_S = 30.0


class UpstreamError(Exception):
    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Sink(Protocol):
    """Takes a response's body inside the protocol's callbacks (push mode, `stream_into`).

    Called with each piece of body the parser finds in a read, then `flush()` once the read is
    parsed, so that a consumer can pass a read on in one write. False from either asks to pause
    reading until `resume()`."""

    def __call__(self, piece: bytes) -> bool: ...

    def flush(self) -> bool: ...


class UpstreamResponse(Protocol):
    """A backend's response as the request path reads it: status and headers, then the body.

    The body is read by pulling (`read`, `read_all`) or pushed into a sink (`stream_into`) whose
    False asks to pause until `resume()`. Errors are `UpstreamError`."""

    status: int
    headers: dict[str, str]  # lower-case names

    @property
    def content_type(self) -> str: ...

    async def read(self) -> bytes: ...

    async def read_all(self, limit: int | None = None) -> bytes: ...

    def stream_into(self, sink: Sink) -> None: ...

    async def wait_sink(self) -> Literal["done", "paused"]: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


class Upstream(Protocol):
    """Where a backend's requests go: a keep-alive `Pool` in the gateway, anything in a test.

    `head(path, headers)` prepares the fixed part of a request's head once; `request(head, extra,
    body)` sends it with per-request header lines and returns once the response's head arrived."""

    def head(self, path: str, headers: dict[str, str]) -> bytes: ...

    async def request(self, head: bytes, extra: bytes, body: bytes) -> UpstreamResponse: ...

    def close(self) -> None: ...


class Pool:
    """Keep-alive connections to one base URL (through `proxy`, an http:// URL, when given)."""

    def __init__(
        self,
        base_url: str,
        connect_s: float | None,
        limit: int,
        *,
        ca_bundle: str | None = None,
        proxy: str | None = None,
        idle_s: float = IDLE_KEEPALIVE_S,
    ) -> None:
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
        self.idle_s = idle_s
        self._idle: deque[Connection] = deque()  # the least recently used first
        self._sweep: asyncio.TimerHandle | None = None
        self._ssl = tls_context(ca_bundle) if parts.scheme == "https" else None
        self.proxy = urlsplit(proxy) if proxy else None
        self._proxy_auth = _proxy_authorization(self.proxy) if self.proxy else None
        self._closed = False

    def head(self, path: str, headers: dict[str, str]) -> bytes:
        """The fixed part of a request's head for `path` (under the base path): prepare once, reuse."""
        target = f"{self.base_path}{path}"
        if self.proxy is not None and self.scheme == "http":  # a forward proxy takes the absolute URL
            target = f"http://{self.host_header}{target}"
        lines = [f"POST {target} HTTP/1.1", f"Host: {self.host_header}"]
        if self.proxy is not None and self.scheme == "http" and self._proxy_auth:
            lines.append(f"Proxy-Authorization: {self._proxy_auth}")
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
        idle = self._idle
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest to be still open at the other end
            if conn.usable():
                return conn
        return None

    async def _connect(self) -> Connection:
        if self.proxy is not None and self.proxy.scheme != "http":
            raise UpstreamError(
                "connect",
                f"the proxy {self._proxy_name()} is {self.proxy.scheme}://: only http:// proxies are supported",
            )
        try:
            async with asyncio.timeout(self.connect_s):
                return await (self._tunnel() if self.proxy is not None and self._ssl else self._open())
        except TimeoutError:
            raise UpstreamError("connect", f"connect timed out after {self.connect_s:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamError("connect", self._connect_error(exc)) from None

    async def _open(self) -> Connection:
        """Straight to the backend, or (plain http) to the forward proxy."""
        host, port = (self.proxy.hostname or "", self.proxy.port or 80) if self.proxy else (self.host, self.port)
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: Connection(self), host, port, ssl=self._ssl, server_hostname=self.host if self._ssl else None
        )
        return conn

    async def _tunnel(self) -> Connection:
        """https through the proxy: CONNECT, then TLS with the backend inside the tunnel."""
        assert self.proxy is not None and self._ssl is not None
        loop = asyncio.get_running_loop()
        transport, tunnel = await loop.create_connection(_Tunnel, self.proxy.hostname or "", self.proxy.port or 80)
        try:
            authority = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
            lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
            if self._proxy_auth:
                lines.append(f"Proxy-Authorization: {self._proxy_auth}")
            transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            status = await tunnel.status
            if not 200 <= status < 300:
                raise UpstreamError(
                    "connect", f"the proxy {self._proxy_name()} answered {status} to CONNECT {authority}"
                )
            conn = Connection(self)
            tls = await loop.start_tls(transport, conn, self._ssl, server_hostname=self.host)
            if tls is None:
                raise UpstreamError("connect", "the TLS handshake through the proxy did not complete")
            conn.connection_made(tls)
            return conn
        except BaseException:
            transport.abort()
            raise

    def _connect_error(self, exc: OSError | ssl.SSLError) -> str:
        if isinstance(exc, ssl.SSLError):
            return f"TLS with {self.host_header} failed: {exc}"
        where = f"{self.host_header} through the proxy {self._proxy_name()}" if self.proxy else self.host_header
        return f"cannot connect to {where}: {exc.strerror or exc}"

    def _proxy_name(self) -> str:
        """The proxy's host and port, never its credentials."""
        return f"{self.proxy.hostname}:{self.proxy.port or 80}" if self.proxy else ""

    def put_back(self, conn: Connection) -> None:
        if self._closed or len(self._idle) >= self.limit or not conn.usable():
            conn.abort()
            return
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(self.idle_s, self._evict)

    def _evict(self) -> None:
        """Close the connections idle for `idle_s` or more (the oldest are at the left)."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.idle_s
        idle = self._idle
        while idle and (idle[0].idle_since <= cutoff or not idle[0].usable()):
            idle.popleft().abort()
        if idle:
            self._sweep = loop.call_later(max(0.0, idle[0].idle_since - cutoff), self._evict)

    def close(self) -> None:
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in self._idle:
            conn.abort()
        self._idle.clear()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)


def tls_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """Verification on: the chain and the host name, against the system's CAs or only `ca_bundle`."""
    return ssl.create_default_context(cafile=ca_bundle)


def proxy_for(base_url: str, env: Mapping[str, str]) -> str | None:
    """The proxy URL that `base_url` goes through per the environment, or None (direct)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if _loopback(host):
        return None
    names = ("https_proxy", "HTTPS_PROXY") if parts.scheme == "https" else ("http_proxy", "HTTP_PROXY")
    proxy = next((env[n] for n in names if env.get(n)), None)
    if proxy is None:
        return None
    no_proxy = env.get("no_proxy") or env.get("NO_PROXY")
    if no_proxy and proxy_bypass_environment(parts.netloc.rsplit("@", 1)[-1], {"no": no_proxy}):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _proxy_authorization(proxy: SplitResult) -> str | None:
    if proxy.username is None:
        return None
    pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


class _Tunnel(asyncio.Protocol):
    """The proxy's answer to CONNECT: only its status matters; its head ends the HTTP part."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self.status.done():
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.status.set_exception(UpstreamError("connect", f"the proxy's answer to CONNECT is not HTTP ({exc})"))

    def on_headers_complete(self) -> None:
        if not self.status.done():
            self.status.set_result(self.parser.get_status_code())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.status.done():
            self.status.set_exception(UpstreamError("connect", "the proxy closed the connection during CONNECT"))


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
    """One upstream connection: writes a request, llhttp parses the response as bytes come in."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.busy = False
        self.got_bytes = False
        self.idle_since = 0.0
        self._state = "idle"  # idle | head | body | done
        self._in_head = False  # between the status line and the end of the header fields
        self._head_bytes = 0
        self._headers: dict[str, str] = {}
        self._until_close = False  # the body ends when the connection does
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
        if self._state == "body" and self._until_close and exc is None:
            self._state = "done"
            self._wake()
            return
        if self._state in ("head", "body"):
            detail = f": {exc}" if exc else ""
            where = "before the response headers" if self._state == "head" else "in the middle of the body"
            self._fail(f"the backend closed the connection {where}{detail}")

    def data_received(self, data: bytes) -> None:
        self._parse(data)
        sink = self._sink
        if sink is not None and not sink.flush():  # also after an error: what came before it goes on
            self._pause_for_sink()

    def _parse(self, data: bytes) -> None:
        self.got_bytes = True
        state = self._state
        if state not in ("head", "body"):
            if data.strip():
                self._fail("the backend sent bytes outside a response")
                self.abort()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("the backend switched protocols")
            self.abort()
            return
        except httptools.HttpParserError as exc:
            if self._state == "done":  # bytes after the response: it is complete, the connection is not reused
                self._keep_alive = False
                return
            self._fail(f"not an HTTP response ({exc.__context__ or exc})")
            self.abort()
            return
        if self._state == "head":
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                self._fail("response headers over 64 KiB")
                self.abort()
        elif self._sink is None:
            self._wake()  # in push mode the reader waits only for the end (or an error, or a pause)

    # llhttp's callbacks (it calls them by these names).

    def on_message_begin(self) -> None:
        if self._state != "head":
            raise _Stray()  # a second response: llhttp stops here, and this connection is not reused
        self._in_head = True
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            return  # trailer fields of a chunked body: read and dropped
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip(" \t")
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self.parser
        status = parser.get_status_code()
        if 100 <= status < 200:  # an interim response (e.g. 100 Continue): the real one follows
            return
        headers = self._headers
        self._keep_alive = parser.should_keep_alive()
        chunked = _tokens(headers.get("transfer-encoding"))[-1:] == ["chunked"]
        self._until_close = not chunked and "content-length" not in headers and status not in (204, 304)
        self._state = "body"
        fut = self._head_future
        self._head_future = None
        if fut is not None and not fut.done():
            fut.set_result(Response(status, headers, self))

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is not None:
            if not sink(body):
                self._pause_for_sink()
            return
        self._push(body)

    def on_message_complete(self) -> None:
        if self._state == "body":
            self._state = "done"
            self._wake()

    # -- one request ------------------------------------------------------------------------------------

    def usable(self) -> bool:
        return not self.lost and not self.busy and self.transport is not None and not self.transport.is_closing()

    async def send(self, payload: bytes) -> Response:
        assert self.transport is not None
        self.busy = True
        self.got_bytes = False
        self._state = "head"
        self._head_bytes = 0
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

    def _push(self, piece: bytes) -> None:
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
            took = sink(self._take_body())
            flushed = sink.flush()
            if not (took and flushed):
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
            if self._sink_paused and self.transport is not None:
                # The sink asked for a pause on the response's last bytes (its client stopped
                # reading): reading resumes, or the next request on this connection never sees its
                # answer and waits out the first-byte limit.
                self._sink_paused = False
                self.transport.resume_reading()
            self.pool.put_back(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.lost = True
        self.busy = False
        if self.transport is not None:
            self.transport.abort()


class _Stray(Exception):
    """Raised inside the parser when a response begins where none was asked for."""


def _tokens(value: str | None) -> list[str]:
    """A comma-separated header's tokens, lower-case (`Transfer-Encoding: gzip, Chunked` -> gzip, chunked)."""
    return [t.strip(" \t").lower() for t in value.split(",")] if value else []
