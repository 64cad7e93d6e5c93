"""Hosted backends: TLS verified (a CA bundle option trusts a private CA), and reached through the
proxy that HTTPS_PROXY / HTTP_PROXY name unless NO_PROXY exempts them; a real CONNECT proxy and a
real TLS server on loopback, a certificate made by `openssl` at test time."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import require

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.gateway.config import ConfigError, parse_config
from tokenrace.gateway.upstream import Pool, UpstreamError, proxy_for

from .helpers import ENV, GatewayThread, chat, config_text, http

require("openssl", shutil.which("openssl"), "apt-get install -y openssl")
NAME = "backend.test"  # not resolvable here: only the proxy knows where it is


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for backend.test, localhost and 127.0.0.1: (cert, key)."""
    where = tmp_path_factory.mktemp("tls")
    crt, key = where / "backend.pem", where / "backend.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={NAME}"]
        + ["-addext", f"subjectAltName=DNS:{NAME},DNS:localhost,IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
    )
    return crt, key


class Loop:
    """An event loop in a daemon thread, for the servers below."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def start(self, handler: object, ssl_ctx: ssl.SSLContext | None = None) -> int:
        async def listen() -> int:
            server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_ctx)  # type: ignore[arg-type]
            return int(server.sockets[0].getsockname()[1])

        return asyncio.run_coroutine_threadsafe(listen(), self.loop).result(10)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    await asyncio.gather(pipe(a[0], b[1]), pipe(b[0], a[1]))


class Proxy:
    """A forward proxy: CONNECT tunnels, and absolute-form requests passed on as they are.
    It resolves `backend.test` to 127.0.0.1 itself, and records the first line of each request."""

    def __init__(self, loop: Loop) -> None:
        self.lines: list[str] = []
        self.auth: list[str | None] = []
        self.port = loop.start(self.handle)
        self.url = f"http://user:p%40ss@127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        self.lines.append(line)
        fields = dict(f.split(": ", 1) for f in head.decode().split("\r\n")[1:] if f)
        self.auth.append(fields.get("Proxy-Authorization"))
        method, target, _ = line.split(" ")
        authority = target if method == "CONNECT" else target.split("/")[2]
        host, port = authority.rsplit(":", 1)
        upstream = await asyncio.open_connection("127.0.0.1" if host == NAME else host, int(port))
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(head)
        await splice((reader, writer), upstream)


class TLSBackend:
    """TLS in front of a fake OpenAI server (the TLS ends here, the bytes go on as they are)."""

    def __init__(self, loop: Loop, cert: tuple[Path, Path], fake: FakeServerThread) -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*cert)
        self.fake_port = int(fake.base_url.rsplit(":", 1)[1].split("/")[0])
        self.port = loop.start(self.handle, ctx)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await splice((reader, writer), await asyncio.open_connection("127.0.0.1", self.fake_port))


@pytest.fixture(scope="module")
def net(cert: tuple[Path, Path]) -> Iterator[tuple[Proxy, TLSBackend, FakeServerThread]]:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "output_tokens": 3, "models": ["m"]}) as fake:
        loop = Loop()
        yield Proxy(loop), TLSBackend(loop, cert, fake), fake
        loop.loop.call_soon_threadsafe(loop.loop.stop)


def answer(backend: dict[str, object], env: dict[str, str] | None = None) -> tuple[int, str]:
    """One non-streamed chat through a gateway with this backend: (status, body text)."""
    with GatewayThread(config_text({"a": backend}, [{"model": "m", "backends": ["a"]}]), {**ENV, **(env or {})}) as gw:
        status, _, raw = http("POST", gw.base_url + "/chat/completions", chat(stream=False), timeout=20)
    return status, raw.decode()


def test_tls_is_verified_and_a_ca_bundle_trusts_a_private_ca(
    net: tuple[Proxy, TLSBackend, FakeServerThread], cert: tuple[Path, Path]
) -> None:
    _, tls, _ = net
    url = f"https://localhost:{tls.port}/v1"
    status, text = answer({"url": url, "ca_bundle": str(cert[0])})
    assert status == 200 and json.loads(text)["choices"][0]["message"]["content"]
    status, text = answer({"url": url})  # the system's CAs do not know this certificate
    assert status == 502 and "certificate verify failed" in text, text


def test_https_goes_through_a_connect_tunnel_with_the_proxy_credentials(
    net: tuple[Proxy, TLSBackend, FakeServerThread], cert: tuple[Path, Path]
) -> None:
    proxy, tls, _ = net
    proxy.lines.clear()
    url = f"https://{NAME}:{tls.port}/v1"
    status, text = answer({"url": url, "ca_bundle": str(cert[0])}, {"HTTPS_PROXY": proxy.url})
    assert status == 200, text
    assert proxy.lines == [f"CONNECT {NAME}:{tls.port} HTTP/1.1"] and proxy.auth[-1] == "Basic dXNlcjpwQHNz"
    status, text = answer({"url": url}, {"HTTPS_PROXY": proxy.url})  # inside the tunnel, TLS is still verified
    assert status == 502 and "certificate verify failed" in text, text
    proxy.lines.clear()
    status, text = answer(
        {"url": url, "ca_bundle": str(cert[0])}, {"HTTPS_PROXY": proxy.url, "NO_PROXY": "x.org,.test"}
    )
    assert status == 502 and proxy.lines == [], text  # exempt: straight to backend.test, which does not resolve here


def test_plain_http_goes_through_the_proxy_in_absolute_form(net: tuple[Proxy, TLSBackend, FakeServerThread]) -> None:
    proxy, _, fake = net
    proxy.lines.clear()
    port = fake.base_url.rsplit(":", 1)[1].split("/")[0]
    status, text = answer(
        {"url": f"http://{NAME}:{port}/v1"}, {"http_proxy": proxy.url, "HTTP_PROXY": "http://127.0.0.1:9"}
    )
    assert status == 200, text  # the lower-case name wins, as curl reads them
    assert proxy.lines == [f"POST http://{NAME}:{port}/v1/chat/completions HTTP/1.1"]
    assert proxy.auth[-1] == "Basic dXNlcjpwQHNz"


def test_which_backends_use_a_proxy() -> None:
    env = {"HTTPS_PROXY": "proxy.corp:3128", "HTTP_PROXY": "http://p:1", "NO_PROXY": "internal.corp, .svc"}
    assert proxy_for("https://api.openai.com/v1", env) == "http://proxy.corp:3128"
    assert proxy_for("http://api.example.com/v1", env) == "http://p:1"
    assert proxy_for("https://llm.internal.corp/v1", env) is None
    assert proxy_for("http://vllm.ns.svc:8000/v1", env) is None
    for local in ("http://127.0.0.1:8000/v1", "http://localhost:8000/v1", "http://[::1]:8000/v1"):
        assert proxy_for(local, env) is None  # loopback never goes through a proxy
    assert proxy_for("https://api.openai.com/v1", {}) is None
    assert proxy_for("https://api.openai.com/v1", {**env, "NO_PROXY": "*"}) is None


def test_a_proxy_that_is_not_http_is_a_clear_connect_error() -> None:
    async def main() -> None:
        pool = Pool("https://api.example.com/v1", 2.0, 1, proxy="https://user:secret@proxy.corp:3128")
        with pytest.raises(UpstreamError) as info:
            await pool.request(pool.head("/chat/completions", {}), b"", b"{}")
        assert info.value.kind == "connect" and "only http:// proxies" in str(info.value)
        assert "secret" not in str(info.value) and "proxy.corp:3128" in str(info.value)

    asyncio.run(main())


def test_a_ca_bundle_must_load_and_is_for_https_only(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    def problems(backend: dict[str, object]) -> str:
        with pytest.raises(ConfigError) as info:
            parse_config(config_text({"a": backend}, [{"model": "m", "backends": ["a"]}]), "gw.yaml", ENV)
        return "\n".join(info.value.problems)

    assert "cannot load" in problems({"url": "https://h/v1", "ca_bundle": str(tmp_path / "none.pem")})
    (tmp_path / "junk.pem").write_text("not a certificate")
    assert "cannot load" in problems({"url": "https://h/v1", "ca_bundle": str(tmp_path / "junk.pem")})
    assert "for https:// backends" in problems({"url": "http://h/v1", "ca_bundle": str(cert[0])})
