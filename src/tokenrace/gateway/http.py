"""The gateway's HTTP/1.1 server side: one asyncio Protocol per client connection.

Why not aiohttp's server: benchmarks/http_server_cost.py measured aiohttp's server side at
144-156 µs of CPU per request at 1000 RPS on the project's VM, against 45 µs for a bare protocol,
and the gateway's whole budget is well under a millisecond per request on one core. The upstream
leg was made lean the same way (upstream.py). The gateway needs little of a server: its endpoints
take a whole (small) JSON body and answer with a whole body or a stream.

Parsing is httptools' `HttpRequestParser` (llhttp, Node's parser, as uvicorn uses it), in its
strict mode: this module owns the connection (timers, limits, pipelining, answers) and adds the
rules a proxy needs on top of what llhttp checks. Why a maintained parser: a proxy and the server
behind it must agree on where each request ends, and the ways to disagree (request smuggling) are
many and subtle; llhttp has met them in Node for years.

Scope: HTTP/1.0 and 1.1 (no upgrade, no HTTP/2), origin-form and absolute-form targets, request
bodies by Content-Length or chunked, read whole before the handler runs, keep-alive, pipelined
requests answered in order, `Expect: 100-continue`, HEAD for GET endpoints.

Refused, each with a 4xx/5xx answer and then the connection closed: whatever llhttp refuses
(malformed request lines and header lines, obsolete line folding, control characters, whitespace
before a colon, both Content-Length and Transfer-Encoding, repeated Content-Length, a
Transfer-Encoding whose last coding is not chunked, bad chunk sizes and extensions, bare CR or LF)
with 400, or 505 for an unknown version; and on top of it: HTTP versions other than 1.0 and 1.1
(505), a missing or repeated Host in HTTP/1.1 (400), Transfer-Encoding in HTTP/1.0 (400), any
coding besides chunked (501), a target that is neither a path nor an http(s) URL (400), an upgrade
request with a body (400). A head over 64 KiB gets 431; a body over the limit gets 413, from its
announced length before it is read. After refusing, the server stops writing, reads and drops what
the client still sends for a moment, then closes ("lingering close"), so that the client reads the
answer instead of a connection reset.

Flow control: each connection has a `FlowControl` that the transport drives through the protocol's
`pause_writing`/`resume_writing` (its write buffer over `WRITE_HIGH`, then back under `WRITE_LOW`),
as uvicorn's does; a streamed answer's writer awaits `Stream.drain()` instead of watching the
buffer. A connection that is lost resumes writing, so no writer waits for a client that left.

Timeouts: a connection that has not sent a complete head within `client_idle_s` (after connecting
or after its last answer) is closed without a word; a body not complete within `client_body_s` of
its head gets 408.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol, TypeAlias
from urllib.parse import parse_qsl

import httptools
import orjson

log = logging.getLogger("tokenrace.gateway")
MAX_HEAD = 64 * 1024
LINGER_S = 2.0
WRITE_HIGH = 64 * 1024  # bytes queued for a client before its writers are asked to wait ...
WRITE_LOW = 16 * 1024  # ... until the queue is back under this
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_VERSIONS = {"1.1": (1, 1), "1.0": (1, 0)}
_FRAMING = frozenset(("connection", "content-length", "transfer-encoding"))


class Limits(Protocol):
    max_body_bytes: int
    client_idle_s: float
    client_body_s: float


class BadRequest(Exception):
    def __init__(self, status: int, message: str, code: str, reason: str = "bad_request") -> None:
        super().__init__(message)
        self.status, self.code, self.reason = status, code, reason


class Request:
    """One parsed request. `headers` has lower-case names; repeated fields are joined with ", "."""

    __slots__ = ("method", "path", "query_string", "version", "headers", "body", "keep_alive", "_conn", "stream")

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str,
        version: tuple[int, int],
        headers: dict[str, str],
        conn: Connection,
        keep_alive: bool = True,
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.version = version
        self.headers = headers
        self.body = b""
        self.keep_alive = keep_alive
        self._conn = conn
        self.stream: Stream | None = None

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.query_string))

    @property
    def client_gone(self) -> bool:
        """The client closed its connection (or it is closing): nothing written reaches it."""
        transport = self._conn.transport
        return transport is None or transport.is_closing()

    def abort(self) -> None:
        """Drop the client's connection at once, without a clean end (nothing queued is sent)."""
        transport = self._conn.transport
        if transport is not None:
            transport.abort()

    def start_stream(self, status: int, headers: dict[str, str], first: bytes = b"") -> Stream:
        """Send the head of a streamed answer, with the first piece of its body (in one write);
        the rest follows with `Stream.write`."""
        self.stream = Stream(self, status, headers, first)
        return self.stream


class Reply:
    """A whole answer: status, body, headers. `Content-Length` and `Connection` are added when sent."""

    __slots__ = ("status", "body", "headers")

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        content_type: str | None = "application/json",
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers if headers is not None else {}
        if content_type is not None and "Content-Type" not in self.headers:
            self.headers["Content-Type"] = content_type


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, orjson.dumps(obj), headers)


def error_reply(status: int, message: str, type_: str, code: str, headers: dict[str, str] | None = None) -> Reply:
    """An OpenAI-style error body."""
    return json_reply({"error": {"message": message, "type": type_, "param": None, "code": code}}, status, headers)


class FlowControl:
    """Whether a client's connection takes more bytes now: the transport pauses and resumes it.

    The protocol's `pause_writing`/`resume_writing` (called by the transport when its write buffer
    crosses the high and then the low water mark) set and clear the flag, and `drain()` waits for
    writing to resume. This is uvicorn's FlowControl, for the writing side only.
    """

    __slots__ = ("paused", "_waiter")

    def __init__(self) -> None:
        self.paused = False
        self._waiter: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        """Return once the connection takes bytes again (or is gone)."""
        if not self.paused:
            return
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._waiter)  # a cancelled drain leaves the future to other waiters


class Stream:
    """An answer whose body goes out as it is written: chunked for HTTP/1.1, close-delimited for 1.0.

    `paused` says the client is behind (its connection's write buffer is over the high water
    mark); `drain()` waits until it caught up. `closed` says the client is gone."""

    __slots__ = ("status", "headers", "_transport", "flow", "chunked", "ended", "keep_alive")

    def __init__(self, request: Request, status: int, headers: dict[str, str], first: bytes = b"") -> None:
        self.status, self.headers = status, headers
        conn = request._conn
        self.chunked = request.version >= (1, 1)
        self.keep_alive = self.chunked and request.keep_alive and not conn.server.draining
        self.ended = False
        transport = conn.transport
        assert transport is not None
        self._transport = transport
        self.flow = conn.flow
        if not transport.is_closing():
            head = _head(status, request.version, headers, self.keep_alive, chunked=self.chunked)
            transport.write(head + self._frame(first) if first else head)

    @property
    def closed(self) -> bool:
        return self._transport.is_closing()

    @property
    def paused(self) -> bool:
        return self.flow.paused

    async def drain(self) -> None:
        await self.flow.drain()

    def write(self, data: bytes) -> bool:
        """Send a piece of the body at once. False: the client is gone, nothing was sent."""
        transport = self._transport
        if transport.is_closing():
            return False
        if data:
            transport.write(self._frame(data))
        return True

    def _frame(self, data: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data

    def end(self) -> None:
        if not self._transport.is_closing() and self.chunked:
            self._transport.write(b"0\r\n\r\n")
        self.ended = True


Handler: TypeAlias = Callable[[Request], Awaitable["Reply | Stream | None"]]


class Server:
    """Listens and owns the connections. `handler(request)` returns a Reply, or the Stream it wrote."""

    def __init__(
        self, handler: Handler, limits: Callable[[], Limits], on_refused: Callable[[str], None] | None = None
    ) -> None:
        self.handler = handler
        self.limits = limits
        self.on_refused = on_refused or (lambda reason: None)
        self.connections: set[Connection] = set()
        self.draining = False  # answers say `Connection: close` from now on
        self._server: asyncio.AbstractServer | None = None

    async def listen(self, host: str, port: int, backlog: int = 1024) -> int:
        """Start listening (port 0 picks a free one); returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), host, port, backlog=backlog, reuse_address=True
        )
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop listening and drop every connection (what is queued is flushed first)."""
        self.stop_listening()
        for conn in list(self.connections):
            conn.close()
        await asyncio.sleep(0)


class Connection(asyncio.Protocol):
    """One client connection: llhttp parses what arrives, complete requests are answered in order.

    The parser runs whenever bytes arrive, also while an answer is being prepared (pipelining):
    requests completed meanwhile wait in `queue` (reading pauses while one waits, so nothing is
    buffered without bound), and a refusal found meanwhile waits behind them.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.flow = FlowControl()
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request | BadRequest] = deque()
        self.busy = False  # a handler runs for the request at the head of the line
        self.closing = False  # refused: lingering, then closed
        self.closed = False
        self.task: asyncio.Task[None] | None = None  # the loop holds tasks weakly: this keeps the running one alive
        self._stopped = False  # no more requests are read on this connection (a refusal, or `Connection: close`)
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._eof = False  # the client will send nothing more
        # The message being parsed.
        self._in_body = False  # its head is complete, its body is not
        # Bytes read while the head is incomplete. llhttp does not say where in a piece a pipelined
        # request's head began, so the part of one that shares a piece with the request before it is
        # not counted: the 431 limit holds to within one read.
        self._head_bytes = 0
        self._completed = 0  # requests read whole
        self._url = b""
        self._headers: dict[str, str] = {}
        self._hosts = 0
        self._request: Request | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_limit = 0
        self._expect = False  # 100-continue is owed once the body is awaited

    # -- transport events ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)  # type: ignore[attr-defined]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each SSE event goes out at once
            except (OSError, AttributeError):
                pass
        self.server.connections.add(self)
        self._arm(self.server.limits().client_idle_s, self._idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.flow.resume_writing()  # a writer waiting for this client must not wait any longer
        self.queue.clear()
        self._disarm()
        self.server.connections.discard(self)

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def eof_received(self) -> bool:
        # The client sends nothing more; answers owed may still go out, then we close.
        self._eof = True
        return self.busy

    def data_received(self, data: bytes) -> None:
        if self._stopped or self.closing:
            return  # lingering, or after a request that closes the connection: drop it
        self._feed(data)
        if not self.busy and not self.closing:
            self._await_body()

    # -- reading requests ----------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        """Feed llhttp; while a head is open, at most what is left of MAX_HEAD at a time."""
        pos, end = 0, len(data)
        while pos < end and not self._stopped:
            piece = data
            if not self._in_body:
                room = MAX_HEAD - self._head_bytes
                if end - pos > room:
                    piece = data[pos : pos + room]
                elif pos:
                    piece = data[pos:]
            elif pos:
                piece = data[pos:]
            open_head, completed = not self._in_body, self._completed
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade as up:  # an upgrade without a body: served as plain HTTP/1.1
                pos += int(up.args[0])
                continue
            except httptools.HttpParserError as exc:
                self._malformed(exc)
                return
            pos += len(piece)
            if open_head and not self._in_body and completed == self._completed:
                self._head_bytes += len(piece)  # the head stayed open through the whole piece
                if self._head_bytes >= MAX_HEAD:
                    self._refuse_or_queue(
                        BadRequest(431, f"The request head is over {MAX_HEAD} bytes.", "head_too_large")
                    )
                    return

    def _malformed(self, exc: httptools.HttpParserError) -> None:
        if self._stopped:
            return  # bytes after a request that closes the connection: not read, not refused
        cause = exc.__context__
        self._refuse_or_queue(cause if isinstance(cause, BadRequest) else _refusal(str(exc)))

    # llhttp's callbacks (it calls them by these names); raising BadRequest in one stops the parse.

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._hosts = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_body:
            return  # a chunked body's trailer fields: read and dropped
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").rstrip(" \t")
        headers = self._headers
        if key in headers:
            headers[key] = headers[key] + ", " + text
        else:
            headers[key] = text
        if key == "host":
            self._hosts += 1

    def on_headers_complete(self) -> None:
        parser = self.parser
        version = _VERSIONS.get(parser.get_http_version())
        if version is None:
            raise BadRequest(505, "Only HTTP/1.0 and HTTP/1.1 are served.", "http_version")
        path, query = _target(self._url)
        headers = self._headers
        length = _body_length(headers, version)
        if self._hosts != 1 and (version >= (1, 1) or self._hosts > 1):
            raise BadRequest(400, "An HTTP/1.1 request needs exactly one Host header.", "bad_host")
        if parser.should_upgrade() and length != 0:  # llhttp would not read its body: refuse, or it smuggles
            raise BadRequest(400, "An upgrade request with a body is not served.", "bad_framing")
        limit = self.server.limits().max_body_bytes
        if length > limit:
            raise BadRequest(
                413, f"Request body of {length} bytes is over the limit of {limit}.", "body_too_large", "too_large"
            )
        method = parser.get_method().decode("ascii")
        self._request = Request(method, path, query, version, headers, self, parser.should_keep_alive())
        self._in_body = True
        self._head_bytes = 0
        self._body_limit = limit
        self._expect = length != 0 and version >= (1, 1) and headers.get("expect", "").lower() == "100-continue"
        if not self.busy:
            self._disarm()  # the idle clock stops; the body's clock starts once the body is awaited

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._body_size += len(body)
        self._expect = False
        if self._body_size > self._body_limit:  # chunked: the length is known only as it arrives
            raise BadRequest(
                413, f"Request body is over the limit of {self._body_limit} bytes.", "body_too_large", "too_large"
            )

    def on_message_complete(self) -> None:
        request = self._request
        if request is None:
            return
        body = self._body
        request.body = body[0] if len(body) == 1 else b"".join(body)
        self._request, self._in_body, self._body, self._body_size = None, False, [], 0
        self._completed += 1
        if not request.keep_alive:
            self._stopped = True  # nothing after this request is read
        if self.busy or self.queue:
            self.queue.append(request)
            self._pause()
        else:
            self._dispatch(request)

    def _await_body(self) -> None:
        """After a feed, with no answer in progress: a body under way has its clock and its 100-continue."""
        if not self._in_body:
            return
        if self._timer is None:  # the body's time starts when its head is complete
            self._arm(self.server.limits().client_body_s, self._body_timeout)
        if self._expect and self.transport is not None:
            self._expect = False
            self.transport.write(_CONTINUE)

    # -- answering -----------------------------------------------------------------------------------

    def _dispatch(self, request: Request) -> None:
        self.busy = True
        self._disarm()
        self.task = asyncio.get_running_loop().create_task(self._serve(request))

    async def _serve(self, request: Request) -> None:
        try:
            answer = await self.server.handler(request)
        except Exception:
            log.exception("gateway handler failed")
            answer = (
                error_reply(500, "The gateway failed on this request.", "server_error", "internal_error")
                if request.stream is None
                else None
            )
        self._answered(request, answer)

    def _answered(self, request: Request, answer: Reply | Stream | None) -> None:
        self.task = None
        self.busy = False
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return
        if isinstance(answer, Reply):
            keep = request.keep_alive and not self.server.draining and answer.headers.get("Connection") != "close"
            transport.write(_whole(answer, request.version, keep, with_body=request.method != "HEAD"))
        else:
            stream = answer if answer is not None else request.stream
            keep = stream is not None and stream.keep_alive and stream.ended
        if not keep or (self._eof and not self.queue):
            self.close()
            return
        if self.queue:
            waiting = self.queue.popleft()
            if isinstance(waiting, BadRequest):
                self._refuse(waiting, (1, 1))
                return
            self._dispatch(waiting)
            if self.queue:
                return
        elif self._in_body:
            self._await_body()
        else:
            self._arm(self.server.limits().client_idle_s, self._idle_timeout)
        if self._paused and not self._stopped:
            self._paused = False
            transport.resume_reading()

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _refuse_or_queue(self, exc: BadRequest) -> None:
        """Refuse now, or after the answers owed to the requests before this one."""
        self._stopped = True
        if self.busy or self.queue:
            self.queue.append(exc)
            self._pause()
        else:
            self._refuse(exc, self._request.version if self._request is not None else (1, 1))

    def _refuse(self, exc: BadRequest, version: tuple[int, int]) -> None:
        """Answer an unreadable or unacceptable request ourselves, then linger and close."""
        self.server.on_refused(exc.reason)
        transport = self.transport
        assert transport is not None
        transport.write(
            _whole(error_reply(exc.status, str(exc), "invalid_request_error", exc.code), version, keep_alive=False)
        )
        self.closing = self._stopped = True
        self.queue.clear()
        self._disarm()
        if self._paused:
            self._paused = False
            transport.resume_reading()  # lingering reads (and drops) what still comes
        if transport.can_write_eof():
            transport.write_eof()  # our answer is complete; what the client still sends is dropped
        self._arm(LINGER_S, self.close)

    def _idle_timeout(self) -> None:
        if not self.busy and not self._in_body and not self.closing:
            self.close()

    def _body_timeout(self) -> None:
        if self._in_body and not self.busy and self._request is not None and not self.closing:
            seconds = self.server.limits().client_body_s
            self._refuse(
                BadRequest(
                    408, f"The request body did not arrive within {seconds:g} s.", "body_timeout", "slow_client"
                ),
                self._request.version,
            )

    def close(self) -> None:
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# --- the rules on top of llhttp ---------------------------------------------------------------------


def _target(raw: bytes) -> tuple[str, str]:
    """The path and query of an origin-form (`/p?q`) or absolute-form (`http://h/p?q`) target."""
    if raw[:1] == b"/":  # origin-form, the usual: llhttp checked its characters
        path, _, query = raw.partition(b"?")
        return path.decode("latin-1"), query.partition(b"#")[0].decode("latin-1")
    if raw[:7].lower() != b"http://" and raw[:8].lower() != b"https://":
        raise BadRequest(400, "The request target must be a path or an http(s) URL.", "bad_request_line")
    try:
        url = httptools.parse_url(raw)
    except httptools.HttpParserInvalidURLError:
        raise BadRequest(400, "Malformed request target.", "bad_request_line") from None
    path = url.path or b"/"  # absolute-form without a path means the root
    return path.decode("latin-1"), (url.query or b"").decode("latin-1")


def _body_length(headers: dict[str, str], version: tuple[int, int]) -> int:
    """The announced body length; -1: chunked. llhttp checked the values and their combination."""
    encoding = headers.get("transfer-encoding")
    if encoding is not None:
        if version < (1, 1):
            raise BadRequest(400, "Transfer-Encoding is not allowed in HTTP/1.0.", "bad_framing")
        codings = [c.strip(" \t").lower() for c in encoding.split(",")]
        if codings[-1] != "chunked":  # the length cannot be known (RFC 9112 6.3)
            raise BadRequest(400, f"Transfer-Encoding {encoding[:40]!r} does not end with chunked.", "bad_framing")
        if len(codings) > 1:
            raise BadRequest(
                501, f"Transfer-Encoding {encoding[:40]!r} is not supported (only chunked).", "bad_framing"
            )
        return -1
    length = headers.get("content-length")
    return int(length) if length else 0


# llhttp's reasons (its error texts) -> the error code the client sees; the first match wins.
_CODES = (
    ("chunk", "bad_chunk"),
    ("content-length", "bad_content_length"),
    ("transfer-encoding", "bad_framing"),
    ("header", "bad_header"),
)


def _refusal(reason: str) -> BadRequest:
    """A BadRequest for what llhttp refused, with its reason."""
    if reason == "Invalid HTTP version":  # well-formed, but neither 1.0 nor 1.1 (nor 0.9 or 2.0, llhttp's others)
        return BadRequest(505, "Only HTTP/1.0 and HTTP/1.1 are served.", "http_version")
    low = reason.lower()
    code = next((c for word, c in _CODES if word in low), "bad_request")
    return BadRequest(400, f"Malformed request: {reason}.", code)


# --- writing ------------------------------------------------------------------------------------------

_date_cache: list[Any] = [0, ""]


def _date() -> str:
    """The Date header, formatted once a second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0], _date_cache[1] = now, formatdate(now, usegmt=True)
    return _date_cache[1]  # type: ignore[no-any-return]


def _whole(reply: Reply, version: tuple[int, int], keep_alive: bool, with_body: bool = True) -> bytes:
    """A whole answer's bytes; HEAD gets the length of the body it does not get."""
    head = _head(reply.status, version, reply.headers, keep_alive, len(reply.body))
    return head + reply.body if with_body else head


def _head(
    status: int,
    version: tuple[int, int],
    headers: dict[str, str],
    keep_alive: bool,
    length: int | None = None,
    chunked: bool = False,
) -> bytes:
    lines = [f"HTTP/1.{version[1]} {status} {_REASONS.get(status, 'Unknown')}\r\nDate: {_date()}\r\n"]
    for name, value in headers.items():
        if name.lower() not in _FRAMING:  # the server frames the answer itself
            lines.append(f"{name}: {value}\r\n")
    if length is not None:
        lines.append(f"Content-Length: {length}\r\n")
    elif chunked:
        lines.append("Transfer-Encoding: chunked\r\n")
    if not keep_alive:
        lines.append("Connection: close\r\n")
    elif version < (1, 1):
        lines.append("Connection: keep-alive\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1", "replace")
