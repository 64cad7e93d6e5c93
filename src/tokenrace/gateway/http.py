"""The gateway's HTTP/1.1 server side: one asyncio Protocol per client connection.

Why not aiohttp's server: benchmarks/http_server_cost.py measured aiohttp's server side at
144-156 µs of CPU per request at 1000 RPS on the project's VM, against 45 µs for a bare protocol,
and the gateway's whole budget is well under a millisecond per request on one core. The upstream
leg was made lean the same way (upstream.py). The gateway needs little of a server: its endpoints
take a whole (small) JSON body and answer with a whole body or a stream.

Scope: HTTP/1.0 and 1.1 (no upgrade, no HTTP/2), origin-form targets (`/path?query`), request
bodies by Content-Length or chunked, read whole before the handler runs, keep-alive, pipelined
requests answered in order, `Expect: 100-continue`, HEAD for GET endpoints.

Strict where a proxy can be fooled about where a request ends: both Content-Length and
Transfer-Encoding, a Transfer-Encoding other than `chunked`, a Content-Length that is not digits
(or repeated with different values), obsolete line folding, control characters in a header, and a
malformed request line all get 400 and the connection closed; a head over 64 KiB gets 431; a body
over the limit gets 413 before it is read. After refusing, the server stops writing, reads and
drops what the client still sends for a moment, then closes ("lingering close"), so that the
client reads the answer instead of a connection reset.

Timeouts: a connection that has not sent a complete head within `client_idle_s` (after connecting
or after its last answer) is closed without a word; a body not complete within `client_body_s` of
its head gets 408.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol, TypeAlias
from urllib.parse import parse_qsl

import orjson

log = logging.getLogger("tokenrace.gateway")
MAX_HEAD = 64 * 1024
LINGER_S = 2.0
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


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
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.version = version
        self.headers = headers
        self.body = b""
        self.keep_alive = _wants_keep_alive(version, headers.get("connection"))
        self._conn = conn
        self.stream: Stream | None = None

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.query_string))

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._conn.transport

    def start_stream(self, status: int, headers: dict[str, str]) -> Stream:
        """Send the head of a streamed answer; its body follows with `Stream.write`."""
        self.stream = Stream(self, status, headers)
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


class Stream:
    """An answer whose body goes out as it is written: chunked for HTTP/1.1, close-delimited for 1.0."""

    __slots__ = ("status", "headers", "transport", "chunked", "ended", "keep_alive")

    def __init__(self, request: Request, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        conn = request._conn
        self.chunked = request.version >= (1, 1)
        self.keep_alive = self.chunked and request.keep_alive and not conn.server.draining
        self.ended = False
        transport = conn.transport
        assert transport is not None
        self.transport = transport
        if not transport.is_closing():
            transport.write(_head(status, request.version, headers, self.keep_alive, chunked=self.chunked))

    def write(self, data: bytes) -> None:
        if data and not self.transport.is_closing():
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)

    def end(self) -> None:
        if not self.transport.is_closing() and self.chunked:
            self.transport.write(b"0\r\n\r\n")
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
    """One client connection: read a head and a body, run the handler, answer, repeat."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        # What has arrived and is not consumed yet. A bytearray, so that a request sent in many small
        # pieces costs time linear in its size (appending to bytes would copy it all each time).
        self.buf = bytearray()
        self.state = "head"  # head | body | busy | closing | closed
        self.request: Request | None = None  # the request whose body is being read
        self.need = -1  # body bytes expected; -1: chunked (then `chunks` decodes it)
        self.chunks: Dechunker | None = None
        self._scanned = 0  # how far the head's end has been looked for already
        self.task: asyncio.Task[None] | None = None  # the loop holds tasks weakly: this keeps the running one alive
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._eof = False  # the client will send nothing more

    # -- transport events ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each SSE event goes out at once
            except (OSError, AttributeError):
                pass
        self.server.connections.add(self)
        self._arm(self.server.limits().client_idle_s, self._idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = "closed"
        self.buf.clear()
        self._disarm()
        self.server.connections.discard(self)

    def eof_received(self) -> bool:
        # The client sends nothing more; an answer being prepared may still go out, then we close.
        self._eof = True
        return self.state == "busy"

    def data_received(self, data: bytes) -> None:
        if self.state == "closing":
            return  # lingering: drop it
        self.buf += data
        if self.state == "busy":  # pipelined: wait for the current answer; do not buffer without bound
            if not self._paused and len(self.buf) > MAX_HEAD + self.server.limits().max_body_bytes:
                self._paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            return
        self._advance()

    # -- reading requests ----------------------------------------------------------------------------

    def _advance(self) -> None:
        while self.state in ("head", "body"):
            if self.state == "head" and not self._take_head():
                return
            if not self._take_body():
                return
            self._dispatch()

    def _take_head(self) -> bool:
        buf = self.buf
        while buf[:2] == b"\r\n":
            del buf[:2]  # empty lines before a request line are allowed
        end = buf.find(b"\r\n\r\n", self._scanned)
        if end < 0 or end > MAX_HEAD:
            if len(buf) > MAX_HEAD:
                self._refuse(BadRequest(431, f"The request head is over {MAX_HEAD} bytes.", "head_too_large"), (1, 1))
            self._scanned = max(0, len(buf) - 3)
            return False
        self._scanned = 0
        try:
            request, length = parse_head(bytes(buf[:end]), self)
        except BadRequest as exc:
            self._refuse(exc, (1, 1))
            return False
        del buf[: end + 4]
        self._disarm()
        limits = self.server.limits()
        if length > limits.max_body_bytes:
            self._refuse(
                BadRequest(
                    413,
                    f"Request body of {length} bytes is over the limit of {limits.max_body_bytes}.",
                    "body_too_large",
                    "too_large",
                ),
                request.version,
            )
            return False
        self.request, self.need, self.state = request, length, "body"
        self.chunks = Dechunker(limits.max_body_bytes) if length < 0 else None
        if (
            length != 0
            and not self.buf
            and request.version >= (1, 1)
            and request.headers.get("expect", "").lower() == "100-continue"
        ):
            self.transport.write(_CONTINUE)  # type: ignore[union-attr]
        return True

    def _take_body(self) -> bool:
        request = self.request
        assert request is not None
        if self.chunks is None:
            if len(self.buf) < self.need:
                return self._wait_body()
            request.body = bytes(self.buf[: self.need])
            del self.buf[: self.need]
        else:
            try:
                end = self.chunks.feed(self.buf)
            except BadRequest as exc:
                self._refuse(exc, request.version)
                return False
            if end is None:
                return self._wait_body()
            request.body = self.chunks.body()
            del self.buf[:end]
            self.chunks = None
        self._disarm()
        return True

    def _wait_body(self) -> bool:
        if self._timer is None:  # the body's time starts when its head is complete
            self._arm(self.server.limits().client_body_s, self._body_timeout)
        return False

    # -- answering -----------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        request = self.request
        assert request is not None
        self.request = None
        self.state = "busy"
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
        transport = self.transport
        if self.state == "closed" or transport is None or transport.is_closing():
            return
        if isinstance(answer, Reply):
            keep = request.keep_alive and not self.server.draining and answer.headers.get("Connection") != "close"
            transport.write(_whole(answer, request.version, keep, with_body=request.method != "HEAD"))
        else:
            stream = answer if answer is not None else request.stream
            keep = stream is not None and stream.keep_alive and stream.ended
        if not keep or (self._eof and not self.buf):
            self.close()
            return
        self.state = "head"
        self._arm(self.server.limits().client_idle_s, self._idle_timeout)
        if self._paused:
            self._paused = False
            transport.resume_reading()
        if self.buf:
            self._advance()

    def _refuse(self, exc: BadRequest, version: tuple[int, int]) -> None:
        """Answer an unreadable or unacceptable request ourselves, then linger and close."""
        self.server.on_refused(exc.reason)
        transport = self.transport
        assert transport is not None
        transport.write(
            _whole(error_reply(exc.status, str(exc), "invalid_request_error", exc.code), version, keep_alive=False)
        )
        self.state = "closing"
        self.buf.clear()
        self._disarm()
        if transport.can_write_eof():
            transport.write_eof()  # our answer is complete; what the client still sends is dropped
        self._arm(LINGER_S, self.close)

    def _idle_timeout(self) -> None:
        if self.state == "head":
            self.close()

    def _body_timeout(self) -> None:
        if self.state == "body" and self.request is not None:
            seconds = self.server.limits().client_body_s
            self._refuse(
                BadRequest(
                    408, f"The request body did not arrive within {seconds:g} s.", "body_timeout", "slow_client"
                ),
                self.request.version,
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


# --- parsing ------------------------------------------------------------------------------------------


def parse_head(head: bytes, conn: Connection) -> tuple[Request, int]:
    """A request head (without its final blank line) -> the request and its body length (-1: chunked)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, "Malformed request line.", "bad_request_line")
    method_b, target, version_b = parts
    if version_b == b"HTTP/1.1":
        version = (1, 1)
    elif version_b == b"HTTP/1.0":
        version = (1, 0)
    elif version_b.startswith(b"HTTP/"):
        raise BadRequest(505, "Only HTTP/1.0 and HTTP/1.1 are served.", "http_version")
    else:
        raise BadRequest(400, "Malformed request line.", "bad_request_line")
    if target[:7].lower() == b"http://" or target[:8].lower() == b"https://":
        slash = target.find(
            b"/", target.find(b"//") + 2
        )  # absolute-form: servers must accept it; the path is what counts
        target = target[slash:] if slash >= 0 else b"/"
    if not _TOKEN.fullmatch(method_b) or target[:1] != b"/" or _BAD_VALUE.search(target):
        raise BadRequest(400, "Malformed request line.", "bad_request_line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):  # also refuses obsolete folding (a leading space)
            raise BadRequest(400, "Malformed header line.", "bad_header")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise BadRequest(400, "Control characters in a header value.", "bad_header")
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        if key in headers:
            if key == "content-length" and headers[key] != text:
                raise BadRequest(400, "Conflicting Content-Length headers.", "bad_content_length")
            if key != "content-length":
                headers[key] = headers[key] + ", " + text
        else:
            headers[key] = text
    path_b, _, query_b = target.partition(b"?")
    request = Request(
        method_b.decode("ascii"), path_b.decode("latin-1"), query_b.decode("latin-1"), version, headers, conn
    )
    return request, _body_length(headers)


def _body_length(headers: dict[str, str]) -> int:
    encoding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if encoding is not None:
        if length is not None:
            raise BadRequest(400, "Both Content-Length and Transfer-Encoding were sent.", "bad_framing")
        if encoding.strip().lower() != "chunked":
            raise BadRequest(
                501, f"Transfer-Encoding {encoding[:40]!r} is not supported (only chunked).", "bad_framing"
            )
        return -1
    if length is None:
        return 0
    if not (length.isascii() and length.isdigit()) or len(length) > 15:
        raise BadRequest(400, "Content-Length is not a number.", "bad_content_length")
    return int(length)


class Dechunker:
    """Decodes a chunked body from the start of a growing buffer, keeping its place between calls, so
    that a body sent in many small chunks costs time linear in its size."""

    __slots__ = ("limit", "pos", "parts", "total", "scanned")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.scanned = 0  # how far the trailer's end has been looked for already
        self.pos = 0  # where the next chunk's size line starts
        self.parts: list[bytes] = []
        self.total = 0

    def feed(self, buf: bytes | bytearray) -> int | None:
        """The offset just past the body (and its trailer) once complete, else None (feed again with more)."""
        while True:
            pos = self.pos
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > 1024:
                    raise BadRequest(400, "Bad chunk size line in the request body.", "bad_chunk")
                return None
            size = _chunk_size(bytes(buf[pos:eol]))
            start = eol + 2
            if size == 0:
                return self._trailer_end(buf, start)
            if self.total + size > self.limit:
                raise BadRequest(
                    413, f"Request body is over the limit of {self.limit} bytes.", "body_too_large", "too_large"
                )
            if len(buf) < start + size + 2:
                return None
            if buf[start + size : start + size + 2] != b"\r\n":
                raise BadRequest(400, "Bad chunk framing in the request body.", "bad_chunk")
            self.parts.append(bytes(buf[start : start + size]))
            self.total += size
            self.pos = start + size + 2

    def _trailer_end(self, buf: bytes | bytearray, start: int) -> int | None:
        """After the last chunk: a blank line, or trailer fields ending with one (dropped)."""
        if buf[start : start + 2] == b"\r\n":
            return start + 2
        end = buf.find(b"\r\n\r\n", max(start, self.scanned))
        if end < 0:
            if len(buf) - start > MAX_HEAD:
                raise BadRequest(431, f"The request trailer is over {MAX_HEAD} bytes.", "head_too_large")
            self.scanned = max(start, len(buf) - 3)
            return None
        return end + 4

    def body(self) -> bytes:
        return b"".join(self.parts)


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > 15 or text.strip(b"0123456789abcdefABCDEF"):
        raise BadRequest(400, "Bad chunk size in the request body.", "bad_chunk")
    return int(text, 16)


def _wants_keep_alive(version: tuple[int, int], connection: str | None) -> bool:
    tokens = connection.lower() if connection else ""
    if version >= (1, 1):
        return "close" not in tokens
    return "keep-alive" in tokens


# --- writing ------------------------------------------------------------------------------------------

_date_cache: list[Any] = [0, b""]


def _date() -> bytes:
    """The Date header, formatted once a second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0], _date_cache[1] = now, formatdate(now, usegmt=True).encode()
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
    lines = [
        b"HTTP/1.%d %d %b\r\nDate: %b\r\n" % (version[1], status, _REASONS.get(status, "Unknown").encode(), _date())
    ]
    for name, value in headers.items():
        if name.lower() in ("connection", "content-length", "transfer-encoding"):
            continue  # the server frames the answer itself
        lines.append(f"{name}: {value}\r\n".encode("latin-1", "replace"))
    if length is not None:
        lines.append(b"Content-Length: %d\r\n" % length)
    elif chunked:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    if not keep_alive:
        lines.append(b"Connection: close\r\n")
    elif version < (1, 1):
        lines.append(b"Connection: keep-alive\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)
