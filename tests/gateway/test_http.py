"""The gateway's HTTP/1.1 server side (gateway/http.py) on real sockets, with a small echo handler."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenrace.gateway.http import Reply, Request, Server, Stream


@dataclass
class Limits:
    max_body_bytes: int = 1024
    client_idle_s: float = 5.0
    client_body_s: float = 5.0


async def echo(request: Request) -> Reply | Stream:
    """Echo what was parsed; /stream answers in three chunks; /boom raises."""
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    if request.path == "/stream":
        stream = request.start_stream(200, {"Content-Type": "text/plain"})
        for piece in (b"one ", b"two ", b"three"):
            stream.write(piece)
            await asyncio.sleep(0.01)
        stream.end()
        return stream
    seen = {
        "method": request.method,
        "path": request.path,
        "query": request.query,
        "headers": request.headers,
        "body": request.body.decode("latin-1"),
    }
    return Reply(200, json.dumps(seen).encode(), {"x-seen": "1"})


class ServerThread:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.refused: list[str] = []
        self.port = 0
        self.server: Server | None = None
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self.server = Server(echo, lambda: self.limits, self.refused.append)
            self.port = await self.server.listen("127.0.0.1", 0)
            self._ready.set()

        self._loop.run_until_complete(main())
        self._loop.run_forever()

    def stop(self) -> None:
        assert self.server is not None
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)


@pytest.fixture
def srv() -> Iterator[ServerThread]:
    server = ServerThread(Limits())
    yield server
    server.stop()


def post(path: str, body: bytes, version: str = "1.1", extra: str = "") -> bytes:
    return f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def read_answer(sock: socket.socket) -> tuple[str, dict[str, str], bytes]:
    """One answer with a Content-Length or chunked body, read exactly (leaves the rest on the socket)."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(1)
        if not chunk:
            raise EOFError(raw)
        raw += chunk
    head = raw.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    if "content-length" in headers:
        body = recv_exactly(sock, int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int(recv_line(sock), 16)
            data = recv_exactly(sock, size + 2)
            if size == 0:
                break
            body += data[:-2]
    else:
        body = b""
    return head[0], headers, body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError(out)
        out += chunk
    return out


def recv_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        line += recv_exactly(sock, 1)
    return line[:-2]


def closed(sock: socket.socket) -> bool:
    """True when the server closes the connection (reads to the end)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_keep_alive_and_pipelined_requests_are_answered_in_order(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(post("/a?x=1&y=two", b'{"n": 1}') + post("/b", b'{"n": 2}'))  # two at once
        first, second = read_answer(sock), read_answer(sock)
        sock.sendall(post("http://gw.example:8080/c", b""))  # absolute-form: the path is what counts
        third = read_answer(sock)
        sock.sendall(post("/d", b"") + b"GET /e HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # a client that half-closes still gets its answers, then the close
        fourth, fifth = read_answer(sock), read_answer(sock)
        assert closed(sock)
    seen = [json.loads(a[2]) for a in (first, second, third, fourth, fifth)]
    assert [s["path"] for s in seen] == ["/a", "/b", "/c", "/d", "/e"]
    assert (
        seen[0]["query"] == {"x": "1", "y": "two"} and seen[0]["body"] == '{"n": 1}' and seen[1]["body"] == '{"n": 2}'
    )
    assert seen[0]["headers"]["host"] == "x"  # names are lower-case
    assert (
        first[0] == "HTTP/1.1 200 OK"
        and first[1]["x-seen"] == "1"
        and "connection" not in first[1]
        and "date" in first[1]
    )


def test_http_1_0_closes_unless_asked_to_keep_alive(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(post("/a", b"", "1.0"))
        status, headers, _ = read_answer(sock)
        assert status.startswith("HTTP/1.0 200") and headers["connection"] == "close" and closed(sock)
    with srv.connect() as sock:
        sock.sendall(post("/a", b"", "1.0", "Connection: keep-alive\r\n"))
        assert read_answer(sock)[1]["connection"] == "keep-alive"
        sock.sendall(post("/b", b"", "1.0"))
        assert json.loads(read_answer(sock)[2])["path"] == "/b"
    with srv.connect() as sock:
        sock.sendall(post("/a", b"", "1.1", "Connection: close\r\n"))
        assert read_answer(sock)[1]["connection"] == "close" and closed(sock)


def test_a_chunked_body_in_one_byte_pieces(srv: ServerThread) -> None:
    wire = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    with srv.connect() as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(wire)):
            sock.send(wire[i : i + 1])
        assert json.loads(read_answer(sock)[2])["body"] == "hello world"
        sock.sendall(post("/after", b"ok"))  # the connection is still in step
        assert json.loads(read_answer(sock)[2])["body"] == "ok"


def test_expect_100_continue_is_answered_before_the_body(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        assert recv_exactly(sock, 25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"hello")
        assert json.loads(read_answer(sock)[2])["body"] == "hello"


def test_a_streamed_answer_is_chunked_and_the_connection_stays_usable(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = read_answer(sock)
        assert status == "HTTP/1.1 200 OK" and headers["transfer-encoding"] == "chunked" and body == b"one two three"
        sock.sendall(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        assert json.loads(read_answer(sock)[2])["path"] == "/again"
    with srv.connect() as sock:  # HTTP/1.0: no chunking, the end is the close
        sock.sendall(b"GET /stream HTTP/1.0\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        assert b"chunked" not in head.lower() and body == b"one two three"


def test_head_has_the_length_and_no_body(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = read_answer_head_only(sock)
        assert status == "HTTP/1.1 200 OK" and int(headers["content-length"]) > 0
        assert json.loads(read_answer(sock)[2])["path"] == "/next"  # no body bytes came in between


def read_answer_head_only(sock: socket.socket) -> tuple[str, dict[str, str], bytes]:
    raw = b""
    while not raw.endswith(b"\r\n\r\n"):
        raw += recv_exactly(sock, 1)
    head = raw.decode("latin-1").split("\r\n")
    return head[0], {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}, b""


def test_a_bad_request_pipelined_behind_good_ones_is_refused_after_their_answers(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(
            b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"  # answered slowly, in pieces: the rest waits
            + post("/second", b"two")
            + b"GET /third HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\xa0\r\n\r\n"
            + post("/never", b"")
        )
        assert read_answer(sock)[2] == b"one two three"
        assert json.loads(read_answer(sock)[2])["body"] == "two"
        status, headers, body = read_answer(sock)
        assert status.startswith("HTTP/1.1 400") and headers["connection"] == "close"
        assert json.loads(body)["error"]["code"] == "bad_framing" and closed(sock)


def test_an_upgrade_without_a_body_is_answered_as_http_1_1_and_the_next_request_follows(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(
            b"GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
            + b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert json.loads(read_answer(sock)[2])["path"] == "/up"
        assert json.loads(read_answer(sock)[2])["path"] == "/after"


def test_trailer_fields_do_not_reach_the_request_headers(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(
            b"POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\nok\r\n0\r\nAuthorization: Bearer smuggled\r\nX-Trailer: 1\r\n\r\n"
        )
        seen = json.loads(read_answer(sock)[2])
        assert seen["body"] == "ok" and "authorization" not in seen["headers"] and "x-trailer" not in seen["headers"]


def test_a_handler_that_raises_gets_500_and_the_connection_goes_on(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_answer(sock)
        assert status.startswith("HTTP/1.1 500") and json.loads(body)["error"]["code"] == "internal_error"
        sock.sendall(b"GET /fine HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_answer(sock)[0] == "HTTP/1.1 200 OK"


BAD = {
    "both lengths": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    # RFC 9112 6.3: a request whose last coding is not chunked has no knowable length: 400, then close
    "gzip encoding": (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
    "gzip then chunked": (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    "non-numeric length": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3a\r\n\r\n", 400),
    "signed length": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\n", 400),
    "conflicting lengths": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
    "folded header": (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  continued\r\n\r\n", 400),
    "space before colon": (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    "bare LF in a value": (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\nX-B: 2\r\n\r\n", 400),
    "request line": (b"GET /\tHTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "target without a slash": (b"GET x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "version": (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    "no host": (b"GET / HTTP/1.1\r\n\r\n", 400),
    "bad chunk size": (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    "body over the limit": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n", 413),
    "chunked body over the limit": (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n" + b"x" * 1025,
        413,
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_unreadable_requests_are_refused_with_a_reason_and_the_connection_closed(srv: ServerThread, name: str) -> None:
    wire, status = BAD[name]
    with srv.connect() as sock:
        sock.sendall(wire)
        line, headers, body = read_answer(sock)
        assert line.startswith(f"HTTP/1.1 {status} ") and headers["connection"] == "close"
        assert json.loads(body)["error"]["message"]
        assert closed(sock)
    assert srv.refused  # counted (the gateway turns these into tokenrace_gateway_client_rejections)


def test_a_head_over_64_kib_gets_431(srv: ServerThread) -> None:
    with srv.connect() as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000)
        assert read_answer(sock)[0].startswith("HTTP/1.1 431")


def test_a_body_over_the_limit_is_refused_from_its_length_before_it_is_read(srv: ServerThread) -> None:
    body = b"x" * 2_000_000
    with srv.connect() as sock:
        sock.sendall(f"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        try:
            sock.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, raw = read_answer(sock)
        assert (
            status.startswith("HTTP/1.1 413")
            and "2000000 bytes is over the limit of 1024" in json.loads(raw)["error"]["message"]
        )


def test_after_refusing_the_server_lingers_so_late_client_bytes_cause_no_reset(srv: ServerThread) -> None:
    """Lingering close: the server ends its side and drops what still comes for a moment, so the
    client reads the answer instead of a connection reset (which can overtake it on a real network)."""
    with srv.connect() as sock:
        sock.sendall(b"GET / HTTP/2.0\r\n\r\n")
        assert read_answer(sock)[0].startswith("HTTP/1.1 505")
        assert sock.recv(1) == b""  # the server's side is finished...
        sock.sendall(b"x" * 1000)  # ...but the connection still takes bytes (a closed one answers with a reset)
        time.sleep(0.2)
        sock.sendall(b"y" * 1000)


@pytest.mark.slow
def test_slow_bodies_get_408_and_silent_connections_are_closed() -> None:
    server = ServerThread(Limits(client_idle_s=0.4, client_body_s=0.3))
    try:
        with server.connect() as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf")
            t = time.monotonic()
            assert read_answer(sock)[0].startswith("HTTP/1.1 408") and 0.2 < time.monotonic() - t < 3
        with server.connect() as sock:
            t = time.monotonic()
            assert sock.recv(1) == b"" and 0.3 < time.monotonic() - t < 3
        with server.connect() as sock:  # after an answer, the idle clock starts again
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            read_answer(sock)
            t = time.monotonic()
            assert sock.recv(1) == b"" and 0.3 < time.monotonic() - t < 3
        assert server.refused == ["slow_client"]
    finally:
        server.stop()


def test_draining_answers_say_connection_close(srv: ServerThread) -> None:
    assert srv.server is not None
    with srv.connect() as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert "connection" not in read_answer(sock)[1]
        srv.server.draining = True
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_answer(sock)[1]["connection"] == "close" and closed(sock)


HEAD_BYTES = st.sampled_from(
    [
        b"GET",
        b"POST",
        b" ",
        b"/",
        b"?",
        b"HTTP/1.1",
        b"HTTP/1.0",
        b"\r\n",
        b"\n",
        b"\r",
        b":",
        b"Content-Length",
        b"Transfer-Encoding",
        b"chunked",
        b"0",
        b"5",
        b"-1",
        b"\x00",
        b"\t",
        b"a",
        b"\xff",
    ]
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(HEAD_BYTES, max_size=40))
def test_any_head_gets_an_answer_or_a_close_and_never_a_500(srv: ServerThread, pieces: list[bytes]) -> None:
    with srv.connect() as sock:
        sock.settimeout(10)  # a loaded 2-core machine; the server answers in milliseconds
        sock.sendall(b"".join(pieces) + b"\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # nothing more comes: the server answers what it has, or closes
        raw = b""
        try:
            while chunk := sock.recv(65536):
                raw += chunk
        except ConnectionResetError:
            pass
    for line in raw.split(b"\r\n"):
        if line.startswith(b"HTTP/1."):
            assert line.split(b" ")[1] in (b"200", b"400", b"413", b"431", b"501", b"505"), raw[:300]


# --- chunked bodies over the socket ----------------------------------------------------------------


def chunked(body: bytes, cuts: list[int]) -> bytes:
    out, pos = b"", 0
    for cut in sorted(set(c % (len(body) + 1) for c in cuts)) + [len(body)]:
        if cut > pos:
            out += b"%x\r\n%b\r\n" % (cut - pos, body[pos:cut])
            pos = cut
    return out + b"0\r\n\r\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.binary(max_size=300),
    st.lists(st.integers(0, 300), max_size=6),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
)
def test_chunked_bodies_sent_in_any_pieces_arrive_whole_and_the_next_request_follows(
    srv: ServerThread, body: bytes, cuts: list[int], steps: list[int]
) -> None:
    wire = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, cuts)
    wire += b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
    with srv.connect() as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pos = 0
        for step in steps * (len(wire) // sum(steps) + 1):
            if pos >= len(wire):
                break
            sock.sendall(wire[pos : pos + step])
            pos += step
        assert json.loads(read_answer(sock)[2])["body"] == body.decode("latin-1")
        assert json.loads(read_answer(sock)[2])["path"] == "/next"
