"""Request smuggling, tried from outside: malformed and ambiguous requests sent over real sockets to
a real gateway process, as an attacker would. Each must be refused with a 4xx/5xx and the
connection closed, and none may reach the backend. A property test checks that the gateway's
accept/refuse decision agrees with httptools (llhttp) plus the gateway's own documented rules."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenrace.fakes.fake_server import FakeServerThread

from .conftest import require_redis_server
from .helpers import CLIENT_KEY, config_text, spawn_gateway

# What a desync would smuggle: a whole chat request that must never reach the backend.
SMUGGLED_BODY = b'{"model":"m","messages":[{"role":"user","content":"smuggled"}]}'
SMUGGLED = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    + CLIENT_KEY.encode()
    + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(SMUGGLED_BODY), SMUGGLED_BODY)
)
POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + CLIENT_KEY.encode() + b"\r\n"
CHUNKED_SMUGGLE = b"\r\n\r\n0\r\n\r\n" + SMUGGLED  # read as chunked: an empty body, then the smuggled request
GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"

# name -> (the bytes, the status the gateway answers). The table in docs/gateway.md lists these.
REFUSED: dict[str, tuple[bytes, int]] = {
    # Transfer-Encoding obfuscations (TE.TE desync: the gateway and a front proxy disagree on framing)
    "TE chunked + NBSP (0xA0)": (POST + b"Transfer-Encoding: chunked\xa0" + CHUNKED_SMUGGLE, 400),
    "TE chunked + NEL (0x85)": (POST + b"Transfer-Encoding: chunked\x85" + CHUNKED_SMUGGLE, 400),
    "TE chunked + vertical tab": (POST + b"Transfer-Encoding: chunked\x0b" + CHUNKED_SMUGGLE, 400),
    "TE chunked + trailing tab": (POST + b"Transfer-Encoding: chunked\t" + CHUNKED_SMUGGLE, 400),
    "TE 'chunked, identity'": (POST + b"Transfer-Encoding: chunked, identity" + CHUNKED_SMUGGLE, 400),
    "TE 'identity, chunked'": (POST + b"Transfer-Encoding: identity, chunked" + CHUNKED_SMUGGLE, 501),
    "TE 'gzip, chunked'": (POST + b"Transfer-Encoding: gzip, chunked" + CHUNKED_SMUGGLE, 501),
    "TE xchunked": (POST + b"Transfer-Encoding: xchunked" + CHUNKED_SMUGGLE, 400),
    "TE quoted": (POST + b'Transfer-Encoding: "chunked"' + CHUNKED_SMUGGLE, 400),
    "TE chunked,": (POST + b"Transfer-Encoding: chunked," + CHUNKED_SMUGGLE, 400),
    "TE line starting with a space": (POST + b" Transfer-Encoding: chunked" + CHUNKED_SMUGGLE, 400),
    "TE with a tab before the colon": (POST + b"Transfer-Encoding\t: chunked" + CHUNKED_SMUGGLE, 400),
    "TE twice": (POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked" + CHUNKED_SMUGGLE, 400),
    "TE chunked then identity": (
        POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity" + CHUNKED_SMUGGLE,
        400,
    ),
    "TE identity then chunked": (
        POST + b"Transfer-Encoding: identity\r\nTransfer-Encoding: chunked" + CHUNKED_SMUGGLE,
        501,
    ),
    "TE in HTTP/1.0": (
        b"POST /v1/chat/completions HTTP/1.0\r\nTransfer-Encoding: chunked" + CHUNKED_SMUGGLE,
        400,
    ),
    # Content-Length / Transfer-Encoding conflicts (CL.TE, TE.CL) and odd lengths
    "CL then TE": (POST + b"Content-Length: 4\r\nTransfer-Encoding: chunked" + CHUNKED_SMUGGLE, 400),
    "TE then CL": (POST + b"Transfer-Encoding: chunked\r\nContent-Length: 4" + CHUNKED_SMUGGLE, 400),
    "CL repeated, same value": (POST + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400),
    "CL repeated, other value": (POST + b"Content-Length: 5\r\nContent-Length: 0\r\n\r\nhello" + SMUGGLED, 400),
    "CL list '5, 5'": (POST + b"Content-Length: 5, 5\r\n\r\nhello", 400),
    "CL +5": (POST + b"Content-Length: +5\r\n\r\nhello", 400),
    "CL -1": (POST + b"Content-Length: -1\r\n\r\n", 400),
    "CL hex 0x5": (POST + b"Content-Length: 0x5\r\n\r\nhello", 400),
    "CL '1 2'": (POST + b"Content-Length: 1 2\r\n\r\n", 400),
    "CL empty": (POST + b"Content-Length: \r\n\r\n", 400),
    "CL overflow": (POST + b"Content-Length: 99999999999999999999999\r\n\r\n", 400),
    # chunk sizes and extensions
    "chunk size 0x10": (POST + b"Transfer-Encoding: chunked\r\n\r\n0x10\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", 400),
    "chunk size 1_0": (POST + b"Transfer-Encoding: chunked\r\n\r\n1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", 400),
    "chunk size then a space": (POST + b"Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", 400),
    "chunk size after a space": (POST + b"Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size negative": (POST + b"Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size overlong (17 digits)": (POST + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 17 + b"\r\n", 400),
    "chunk size not hex": (POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    "chunk size ended by a bare LF": (POST + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400),
    "chunk extension with a bare LF": (
        POST + b"Transfer-Encoding: chunked\r\n\r\n5;a=b\n0\r\n\r\n" + SMUGGLED + b"\r\nhello\r\n0\r\n\r\n",
        400,
    ),
    "chunk extension with a bare CR": (POST + b"Transfer-Encoding: chunked\r\n\r\n5;a=b\rc\r\nhello\r\n0\r\n\r\n", 400),
    "chunk data longer than its size": (POST + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello!\r\n0\r\n\r\n", 400),
    "chunk extension with a control char": (
        POST + b"Transfer-Encoding: chunked\r\n\r\n5;a=\x01\r\nhello\r\n0\r\n\r\n",
        400,
    ),
    # header lines
    "obs-fold (space)": (GET + b"X-A: 1\r\n folded\r\n\r\n", 400),
    "obs-fold (tab)": (GET + b"X-A: 1\r\n\tfolded\r\n\r\n", 400),
    "NUL in a value": (GET + b"X-A: a\x00b\r\n\r\n", 400),
    "control char 0x01 in a value": (GET + b"X-A: a\x01b\r\n\r\n", 400),
    "DEL in a value": (GET + b"X-A: a\x7fb\r\n\r\n", 400),
    "NUL in a name": (GET + b"X\x00A: 1\r\n\r\n", 400),
    "space before the colon": (b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    "tab before the colon": (b"GET /healthz HTTP/1.1\r\nHost\t: x\r\n\r\n", 400),
    "no colon": (GET + b"X-A 1\r\n\r\n", 400),
    "empty name": (GET + b": 1\r\n\r\n", 400),
    "8-bit byte in a name": (GET + b"X\xe9: 1\r\n\r\n", 400),
    "bare LF ends a header": (GET + b"X-A: 1\nX-B: 2\r\n\r\n", 400),
    "bare CR in a header": (GET + b"X-A: 1\rX-B: 2\r\n\r\n", 400),
    # Host (RFC 9112 3.2)
    "HTTP/1.1 without Host": (b"GET /healthz HTTP/1.1\r\n\r\n", 400),
    "two Host headers": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    # versions
    "HTTP/2.0 in a request line": (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    "HTTP/1.2": (b"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n", 505),
    "HTTP/0.9": (b"GET /healthz HTTP/0.9\r\nHost: x\r\n\r\n", 505),
    "HTTP/3.0": (b"GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", 505),
    "no version": (b"GET /healthz\r\n\r\n", 505),
    "http/1.1 in lower case": (b"GET /healthz http/1.1\r\nHost: x\r\n\r\n", 400),
    "HTTP/11": (b"GET /healthz HTTP/11\r\nHost: x\r\n\r\n", 400),
    "HTTP/1.10": (b"GET /healthz HTTP/1.10\r\nHost: x\r\n\r\n", 400),
    # request lines
    "tab in the request line": (b"GET\t/healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "a space before the method": (b" GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "method in lower case": (b"get /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "unknown method": (b"FOO /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "two targets": (b"GET /a /b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "target without a slash": (b"GET healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "asterisk target": (b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "ftp:// target": (b"GET ftp://h/healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "NUL in the target": (b"GET /health\x00z HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "8-bit byte in the target": (b"GET /health\xe9 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "bare LF after the request line": (b"GET /healthz HTTP/1.1\nHost: x\r\n\r\n", 400),
    "CONNECT": (b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", 400),
    "upgrade with a body": (
        POST + b"Connection: upgrade\r\nUpgrade: h2c\r\nContent-Length: %d\r\n\r\n%b" % (len(SMUGGLED), SMUGGLED),
        400,
    ),
    # limits
    "head over 64 KiB": (GET + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    "body over the limit (announced)": (POST + b"Content-Length: 70000\r\n\r\n", 413),
}


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "two-workers"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, FakeServerThread]]:
    """The gateway as one process, and as two workers on one port (the same rules in each worker)."""
    workers: int = request.param
    if workers > 1:
        require_redis_server()
    with FakeServerThread({"ttft_ms": 0, "itl_ms": 0, "output_tokens": 2, "models": ["m"]}) as fake:
        path = Path(tmp_path_factory.mktemp("gw")) / "gateway.yaml"
        path.write_text(
            config_text(
                {"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], limits={"max_body_bytes": 65536}
            )
        )
        proc, url = spawn_gateway(path, workers=workers)
        try:
            yield url, fake
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def exchange(url: str, wire: bytes, pieces: list[int] | None = None) -> bytes:
    """Send `wire` (in pieces if given), half-close, and read all the gateway answers until it closes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pos = 0
        try:
            for size in pieces or []:
                sock.sendall(wire[pos : pos + size])
                pos += size
            sock.sendall(wire[pos:])
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all sent
        raw = b""
        try:
            while chunk := sock.recv(65536):
                raw += chunk
        except ConnectionResetError:
            pass
    return raw


def final_status(raw: bytes) -> tuple[int | None, bytes]:
    """The first final (non-1xx) answer's status and head."""
    while raw.startswith(b"HTTP/1.1 1"):
        raw = raw.split(b"\r\n\r\n", 1)[1]
    if not raw.startswith(b"HTTP/1."):
        return None, raw
    head = raw.split(b"\r\n\r\n", 1)[0]
    return int(head.split(b" ", 2)[1]), head


@pytest.mark.parametrize("name", list(REFUSED))
def test_ambiguous_and_malformed_requests_are_refused_and_closed(
    gateway: tuple[str, FakeServerThread], name: str
) -> None:
    url, fake = gateway
    wire, expected = REFUSED[name]
    raw = exchange(url, wire)
    status, head = final_status(raw)
    assert status == expected, (name, raw[:300])
    assert b"\r\nConnection: close\r\n" in head + b"\r\n"
    rest = raw.split(b"\r\n\r\n", 1)[1]
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = json.loads(rest[:length])
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"]
    assert rest[length:] == b""  # one answer, then the close (exchange read to the end)
    assert fake.log() == []  # nothing reached the backend, smuggled or not


def test_the_table_is_large_and_well_formed_requests_still_pass(gateway: tuple[str, FakeServerThread]) -> None:
    url, fake = gateway
    assert len(REFUSED) >= 30
    fine = [
        POST + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(SMUGGLED_BODY), SMUGGLED_BODY),
        POST
        + b"Transfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n%b\r\n0\r\nX-Trailer: 1\r\n\r\n"
        % (len(SMUGGLED_BODY), SMUGGLED_BODY),
        POST + b"Transfer-Encoding: Chunked\r\nExpect: 100-continue\r\nContent-Type: application/json\r\n\r\n"
        b"%X\r\n%b\r\n0\r\n\r\n" % (len(SMUGGLED_BODY), SMUGGLED_BODY),
        b"GET /healthz HTTP/1.0\r\n\r\n",  # HTTP/1.0 needs no Host
        b"GET http://gw.example/healthz HTTP/1.1\r\nHost: gw.example\r\n\r\n",  # absolute-form
        b"\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",  # upgrade ignored
    ]
    for wire in fine:
        status, _ = final_status(exchange(url, wire))
        assert status == 200, wire[:120]
    assert len(fake.log()) == 3
    fake.reset()


# --- agreement with httptools ------------------------------------------------------------------------

REFUSALS = {400, 413, 431, 501, 505}  # the statuses of the gateway's own refusals (app answers: 200, 401, 404, 405)


class Stop(Exception):
    pass


class Oracle:
    """What the gateway should decide about the first request in `wire`: llhttp's verdict on the
    whole input, then the gateway's documented rules on top (docs/gateway.md)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.verdict = "incomplete"

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        version = self.parser.get_http_version()
        names = [n for n, _ in self.headers]
        te = [v for n, v in self.headers if n == b"transfer-encoding"]
        codings = [c.strip(b" \t").lower() for c in b",".join(te).split(b",")] if te else []
        announced = bool(te) or any(n == b"content-length" and v.strip(b" \t") != b"0" for n, v in self.headers)
        broken = (
            version not in ("1.0", "1.1")
            or names.count(b"host") > 1
            or (version == "1.1" and b"host" not in names)
            or (te and (version == "1.0" or codings != [b"chunked"]))
            or not (
                self.url.startswith(b"/") or self.url[:7].lower() == b"http://" or self.url[:8].lower() == b"https://"
            )
            or (self.parser.should_upgrade() and announced)
        )
        if broken:
            self.verdict = "refused"
            raise Stop()

    def on_message_complete(self) -> None:
        self.verdict = "complete"
        raise Stop()  # only the first request counts

    def judge(self, wire: bytes) -> str:
        try:
            self.parser.feed_data(wire)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserCallbackError:
            pass  # Stop: the verdict is set
        except httptools.HttpParserError:
            return "refused"
        return self.verdict


# Mostly well-formed pieces, with odd ones mixed in, so that both verdicts come up often.
METHODS = [b"GET", b"POST", b"HEAD", b"PUT"] * 4 + [b"get", b"FOO", b"G ET"]
TARGETS = [b"/healthz", b"/v1/chat/completions", b"/v1/models?x=1", b"http://h/healthz", b"/%41"] * 3
TARGETS += [b"*", b"x", b"/a b", b"/\x00"]
VERSIONS = [b"HTTP/1.1"] * 12 + [b"HTTP/1.0"] * 4 + [b"HTTP/2.0", b"HTTP/0.9", b"http/1.1", b"HTTP/1.x", b""]
EXTRA = [b"Accept: */*", b"User-Agent: t", b"Connection: close", b"Connection: keep-alive", b"X-Empty:"] * 4
EXTRA += [b"Connection: upgrade", b"Upgrade: h2c", b"Expect: 100-continue", b"Host: y", b" folded", b"X-A: a\x00b"]
EXTRA += [b"X-A : 1", b"X-A: 1\nX-B: 2", b"X-8bit: \xe9", b"X-Tab: a\tb", b"Content-Length: 3"]
FRAMINGS = [
    (b"", b""),
    (b"", b""),
    (b"", b""),
    (b"Content-Length: 3\r\n", b"abc"),
    (b"Content-Length: 3\r\n", b"abc"),
    (b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    (b"Content-Length: 3\r\n", b"ab"),  # incomplete
    (b"Content-Length: 0\r\n", b""),
    (b"Content-Length: abc\r\n", b""),
    (b"Content-Length: 3, 3\r\n", b"abc"),
    (b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    (b"Transfer-Encoding: chunked\r\n", b"3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"),
    (b"Transfer-Encoding: chunked\r\n", b"5 \r\nhello\r\n0\r\n\r\n"),
    (b"Transfer-Encoding: chunked\r\n", b"0x3\r\nabc\r\n0\r\n\r\n"),
    (b"Transfer-Encoding: chunked\r\n", b"3;a\nb\r\nabc\r\n0\r\n\r\n"),
    (b"Transfer-Encoding: chunked\xa0\r\n", b"0\r\n\r\n"),
    (b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"),
    (b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"),
    (b"Transfer-Encoding:\tchunked\r\n", b"0\r\n\r\n"),
    (b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", b"0\r\n\r\n"),
]


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    version = draw(st.sampled_from(VERSIONS))
    line = draw(st.sampled_from(METHODS)) + b" " + draw(st.sampled_from(TARGETS)) + (b" " + version if version else b"")
    headers = [b"Host: x"] if draw(st.integers(0, 9)) else []
    headers += draw(st.lists(st.sampled_from(EXTRA), max_size=2))
    framing, body = draw(st.sampled_from(FRAMINGS))
    ending = draw(st.sampled_from([b"\r\n"] * 9 + [b"\n"]))
    return line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + framing + ending + body


@pytest.mark.slow
@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(wire=requests(), pieces=st.lists(st.integers(1, 30), max_size=4))
def test_the_gateway_decides_as_httptools_does(
    gateway: tuple[str, FakeServerThread], wire: bytes, pieces: list[int]
) -> None:
    url, _ = gateway
    expected = Oracle().judge(wire)
    status, _ = final_status(exchange(url, wire, pieces))
    got = "incomplete" if status is None else "refused" if status in REFUSALS else "complete"
    assert got == expected, (wire, status)
