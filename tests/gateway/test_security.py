"""Client keys, rate limits, body and client limits; upstream keys go only to their own backend
and appear in no log line, metric, state or error text."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from tests.conftest import fake_key, wait_until

from tokenrace.fakes.fake_server import FakeServerThread

from .helpers import (
    ADMIN_KEY,
    CLIENT_KEY,
    UPSTREAM_KEY,
    GatewayThread,
    SteppedClock,
    chat,
    config_text,
    http,
    serve_chat,
)

SECOND_KEY = fake_key("sk-", "second")


class CaptureServer:
    """An OpenAI-ish server that records the headers of every request it gets."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.url = serve_chat(self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        body = {
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        }
        return web.json_response(body)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 0, "output_tokens": 4, "models": ["m"]}) as srv:
        yield srv


def start(text: str, env: dict[str, str] | None = None) -> GatewayThread:
    return GatewayThread(text, env).__enter__()


def test_missing_or_unknown_keys_get_401(fake: FakeServerThread) -> None:
    gw = start(config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}]))
    try:
        for key in (None, "wrong-key", ""):
            status, _, raw = http("POST", gw.base_url + "/chat/completions", chat(), key=key)
            assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
        assert http("GET", gw.base_url + "/models", key=None)[0] == 401
        assert (
            http(
                "POST",
                gw.base_url + "/chat/completions",
                chat(),
                headers={"Authorization": f"Basic {CLIENT_KEY}"},
                key=None,
            )[0]
            == 401
        )
        assert http("POST", gw.base_url + "/chat/completions", chat())[0] == 200
        assert len(fake.log()) >= 1
    finally:
        gw.stop()


def test_keys_can_be_switched_off(fake: FakeServerThread) -> None:
    gw = start(
        config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], auth={"required": False})
    )
    try:
        assert http("POST", gw.base_url + "/chat/completions", chat(), key=None)[0] == 200
    finally:
        gw.stop()


def test_per_key_rate_limit(fake: FakeServerThread, gateway_clock: SteppedClock) -> None:
    auth = {"keys": [{"name": "tester", "key_env": "GW_CLIENT_KEY", "rate_limit": {"rps": 2, "burst": 3}}]}
    gw = start(config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], auth=auth))
    try:
        statuses = [http("POST", gw.base_url + "/chat/completions", chat(stream=False))[0] for _ in range(5)]
        assert statuses[:3] == [200, 200, 200] and statuses[3] == 429
        status, headers, raw = http("POST", gw.base_url + "/chat/completions", chat(stream=False))
        assert (
            status == 429
            and int(headers["Retry-After"]) >= 1
            and json.loads(raw)["error"]["type"] == "rate_limit_error"
        )
        gateway_clock.advance(0.6)  # 2 tokens/s: one more request's worth
        assert http("POST", gw.base_url + "/chat/completions", chat(stream=False))[0] == 200
    finally:
        gw.stop()


def test_bad_requests_are_refused_by_the_gateway_with_clear_errors(fake: FakeServerThread) -> None:
    gw = start(
        config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], limits={"max_body_bytes": 2048})
    )
    try:
        url = gw.base_url + "/chat/completions"
        status, _, raw = http("POST", url, chat(messages=[{"role": "user", "content": "x" * 5000}]))
        assert status == 413 and "over the limit of 2048" in json.loads(raw)["error"]["message"]
        assert http("POST", url, b"{not json")[0] == 400
        assert http("POST", url, b"[1, 2]")[0] == 400
        status, _, raw = http("POST", url, {"messages": []})
        assert status == 400 and "`model` is required" in json.loads(raw)["error"]["message"]
        status, _, raw = http("POST", url, chat(model="nope"))
        assert status == 404 and json.loads(raw)["error"]["code"] == "model_not_found" and "served: m" in raw.decode()
        assert http("POST", url, chat(stream="yes"))[0] == 400
        assert len(fake.log()) == 0 or all(e["status"] == 200 for e in fake.log())
    finally:
        gw.stop()


@pytest.mark.slow
def test_slow_and_idle_clients_time_out(fake: FakeServerThread) -> None:
    gw = start(
        config_text(
            {"a": {"url": fake.base_url}},
            [{"model": "m", "backends": ["a"]}],
            limits={"client_body_s": 0.3, "client_idle_s": 0.5},
        )
    )
    try:
        host, port = gw.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:  # sends half its body, then nothing
            sock.sendall(
                f'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CLIENT_KEY}\r\nContent-Length: 100\r\n\r\n{{"mo'.encode()
            )
            reply = sock.recv(65536)
            assert b" 408 " in reply.split(b"\r\n")[0]
        with socket.create_connection((host, int(port)), timeout=5) as sock:  # connects and never speaks
            t = time.monotonic()
            assert sock.recv(1) == b""
            assert 0.3 < time.monotonic() - t < 3
        with socket.create_connection((host, int(port)), timeout=5) as sock:  # half a request head
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            assert sock.recv(1) == b""
    finally:
        gw.stop()


def test_admin_needs_the_admin_key(fake: FakeServerThread) -> None:
    routes = [{"model": "m", "backends": ["a"], "canary": {"backend": "b"}}]
    backends = {"a": {"url": fake.base_url}, "b": {"url": fake.base_url}}
    gw = start(config_text(backends, routes))
    try:
        assert http("GET", gw.url + "/admin/state", key=CLIENT_KEY)[0] == 401
        assert http("POST", gw.url + "/admin/canary/m/pause", key=CLIENT_KEY)[0] == 401
        status, _, raw = http("POST", gw.url + "/admin/canary/m/pause", key=ADMIN_KEY)
        assert status == 200 and json.loads(raw)["canary"]["state"] == "paused"
        assert http("POST", gw.url + "/admin/canary/m/pause", key=ADMIN_KEY)[0] == 409
        assert http("POST", gw.url + "/admin/canary/other/pause", key=ADMIN_KEY)[0] == 404
    finally:
        gw.stop()
    no_admin = config_text(backends, routes).replace("admin:\n  key_env: GW_ADMIN_KEY\n", "")
    gw = start(no_admin)
    try:
        assert http("GET", gw.url + "/admin/state", key=None)[0] == 200
        assert http("POST", gw.url + "/admin/canary/m/pause", key=ADMIN_KEY)[0] == 403
    finally:
        gw.stop()


def test_upstream_keys_go_only_to_their_own_backend_and_nowhere_else(
    fake: FakeServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    one, two = CaptureServer(), CaptureServer()
    env = {"GW_CLIENT_KEY": CLIENT_KEY, "GW_ADMIN_KEY": ADMIN_KEY, "KEY_ONE": UPSTREAM_KEY, "KEY_TWO": SECOND_KEY}
    backends: dict[str, Any] = {
        "one": {"url": one.url, "api_key_env": "KEY_ONE"},
        "two": {"url": two.url, "api_key_env": "KEY_TWO"},
        "dead": {"url": "http://127.0.0.1:9/v1", "api_key_env": "KEY_ONE"},
        "failing": {"url": fake.base_url, "api_key_env": "KEY_TWO", "headers": {"x-fake-fault": "500"}},
    }
    routes = [
        {"model": "one", "backends": ["one"]},
        {"model": "two", "backends": ["two"]},
        {"model": "dead", "backends": ["dead"]},
        {"model": "m", "backends": ["failing"]},
    ]
    caplog.set_level(logging.DEBUG)
    gw = start(config_text(backends, routes, retry={"attempts": 2, "backoff_ms": 1}), env)
    try:
        texts = []
        for model in ("one", "two", "dead", "m"):
            texts.append(http("POST", gw.base_url + "/chat/completions", chat(model=model, stream=False))[2].decode())
        texts.append(
            http("POST", gw.base_url + "/chat/completions", chat(model="m", fake={"fault": "disconnect_midstream"}))[
                2
            ].decode()
        )
        texts.append(http("GET", gw.url + "/metrics", key=None)[2].decode())
        texts.append(http("GET", gw.url + "/admin/state", key=ADMIN_KEY)[2].decode())
    finally:
        gw.stop()
    assert (
        one.headers[0]["Authorization"] == f"Bearer {UPSTREAM_KEY}"
        and two.headers[0]["Authorization"] == f"Bearer {SECOND_KEY}"
    )
    assert all(
        CLIENT_KEY not in json.dumps(h) for h in one.headers + two.headers
    )  # the client's key stays at the gateway
    texts.append(caplog.text)
    for secret in (UPSTREAM_KEY, SECOND_KEY, CLIENT_KEY, ADMIN_KEY):
        assert all(secret not in text for text in texts), secret


@pytest.mark.slow
def test_a_client_that_stops_reading_is_cut_off(fake: FakeServerThread) -> None:
    gw = start(
        config_text({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], limits={"client_write_s": 0.5})
    )
    try:
        host, port = gw.url.removeprefix("http://").split(":")
        body = json.dumps(chat(fake={"output_tokens": 40000, "itl_ms": 0, "ttft_ms": 0})).encode()
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CLIENT_KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert b" 200 " in sock.recv(4096)
            disconnected = 'tokenrace_gateway_client_disconnects_total{backend="a",route="m"} 1.0'

            # Not reading: the gateway's buffer for us fills up, and it gives up on us.
            def counted() -> bytes:
                text = http("GET", gw.url + "/metrics", key=None)[2]
                return text if disconnected in text.decode() else b""

            metrics = wait_until(counted, 10, "the slow reader's disconnect")
            assert 'tokenrace_gateway_in_flight{backend="a",route="m"} 0.0' in metrics.decode()
            assert 'tokenrace_gateway_requests_total{backend="a",route="m",status="499"} 1.0' in metrics.decode()
    finally:
        gw.stop()


def test_unknown_paths_get_404_wrong_methods_405_and_head_works(fake: FakeServerThread) -> None:
    routes = [{"model": "org/m", "backends": ["a"], "canary": {"backend": "b"}}]
    gw = start(config_text({"a": {"url": fake.base_url}, "b": {"url": fake.base_url}}, routes))
    try:
        status, headers, raw = http("GET", gw.url + "/v1/chat/completions")
        assert status == 405 and headers["Allow"] == "POST" and json.loads(raw)["error"]["code"] == "method_not_allowed"
        status, headers, _ = http("POST", gw.url + "/healthz", b"{}")
        assert status == 405 and headers["Allow"] == "GET, HEAD"
        status, _, raw = http("GET", gw.url + "/v2/anything")
        assert status == 404 and json.loads(raw)["error"]["code"] == "not_found"
        status, headers, raw = http("HEAD", gw.url + "/healthz")
        assert status == 200 and raw == b"" and int(headers["Content-Length"]) > 0
        status, _, raw = http(
            "POST", gw.url + "/admin/canary/org%2Fm/pause", key=ADMIN_KEY
        )  # a route name with a slash
        assert status == 200 and json.loads(raw)["route"] == "org/m"
        assert http("POST", gw.url + "/admin/canary/org/m/resume", key=ADMIN_KEY)[0] == 200
        assert http("POST", gw.url + "/admin/canary/org/m/explode", key=ADMIN_KEY)[0] == 404
    finally:
        gw.stop()
