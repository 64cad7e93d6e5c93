"""Headers through the gateway, with real sockets: which client headers reach a backend, which
backend headers reach the client, and the configuration that changes the default."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from tokenrace.gateway.config import ConfigError, parse_config

from .helpers import CLIENT_KEY, ENV, UPSTREAM_KEY, GatewayThread, chat, config_text, serve_chat

SSE_BODY = b'data: {"id":"s","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


class HeaderBackend:
    """Records each request's headers; answers by model: `ok`, `stream`, `bad` (400), `busy` (503).

    Every answer carries headers of its own, a hop-by-hop one among them."""

    def __init__(self) -> None:
        self.seen: list[dict[str, list[str]]] = []  # lower-case name -> every value sent
        self.url = serve_chat(self._handle)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            seen.setdefault(name.lower(), []).append(value)
        self.seen.append(seen)
        model = (await request.json())["model"]
        own = {"OpenAI-Processing-Ms": "12", "X-Ratelimit-Remaining-Requests": "7", "Keep-Alive": "timeout=5"}
        if model == "stream":
            resp = web.StreamResponse(headers={**own, "Content-Type": "text/event-stream", "Cache-Control": "private"})
            await resp.prepare(request)
            await resp.write(SSE_BODY)
            await resp.write_eof()
            return resp
        status = {"ok": 200, "bad": 400, "busy": 503}[model]
        body = (
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
            if status == 200
            else {"error": {"message": model}}
        )
        return web.json_response(body, status=status, headers=own)


@pytest.fixture(scope="module")
def backend() -> Iterator[HeaderBackend]:
    yield HeaderBackend()


ROUTES: list[dict[str, Any]] = [{"model": m, "backends": ["a"]} for m in ("ok", "stream", "bad", "busy")] + [
    {
        "model": "narrow",
        "backends": ["n"],
        "forward_headers": {"allow": ["x-session-id", "openai-*"], "deny": ["openai-organization"]},
    },
]


@pytest.fixture(scope="module")
def gw(backend: HeaderBackend) -> Iterator[GatewayThread]:
    backends = {
        "a": {"url": backend.url, "api_key_env": "GW_UPSTREAM_KEY", "headers": {"X-Tenant": "gateway"}},
        "n": {"url": backend.url, "models": {"narrow": "ok"}},
    }
    text = config_text(backends, ROUTES, retry={"attempts": 1})
    with GatewayThread(text) as started:
        yield started


CLIENT_HEADERS = {
    "Authorization": f"Bearer {CLIENT_KEY}",
    "X-Session-ID": "session-42",
    "X-Request-ID": "client-request-7",
    "OpenAI-Organization": "org-1",
    "OpenAI-Beta": "assistants=v2",
    "anthropic-beta": "prompt-caching",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "Cookie": "session=secret",
    "X-Api-Key": "client-side-key",
    "X-Tenant": "someone-else",
    "Connection": "keep-alive, X-Hop",
    "X-Hop": "for the next hop only",
    "Keep-Alive": "timeout=5",
}


def post(
    gw: GatewayThread, model: str, stream: bool = False, headers: dict[str, str] | None = None
) -> tuple[int, list[tuple[str, str]], bytes]:
    """A request with exactly these headers (http.client adds Host and Content-Length only)."""
    host, port = gw.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            json.dumps(chat(model=model, stream=stream)),
            headers={"Content-Type": "application/json", **(headers or CLIENT_HEADERS)},
        )
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read()
    finally:
        conn.close()


def test_end_to_end_headers_reach_the_backend_and_credentials_and_hop_by_hop_do_not(
    gw: GatewayThread, backend: HeaderBackend
) -> None:
    status, _, _ = post(gw, "ok")
    assert status == 200
    seen = backend.seen[-1]
    for name in ("x-session-id", "openai-organization", "openai-beta", "anthropic-beta", "traceparent"):
        assert seen[name] == [CLIENT_HEADERS[next(k for k in CLIENT_HEADERS if k.lower() == name)]], name
    assert seen["x-request-id"] == ["client-request-7"]  # the client's id, once
    assert seen["authorization"] == [f"Bearer {UPSTREAM_KEY}"]  # the backend's key, not the client's
    assert CLIENT_KEY not in json.dumps(seen)
    assert seen["x-tenant"] == ["gateway"]  # the backend's own `headers:` win over the client's
    for name in ("cookie", "x-api-key", "x-hop", "keep-alive"):
        assert name not in seen, name
    assert seen["host"] == [backend.url.removeprefix("http://").removesuffix("/v1")]
    assert seen["content-type"] == ["application/json"] and len(seen["content-length"]) == 1


def test_a_route_can_narrow_what_is_forwarded(gw: GatewayThread, backend: HeaderBackend) -> None:
    status, _, _ = post(gw, "narrow")
    assert status == 200
    seen = backend.seen[-1]
    assert seen["x-session-id"] == ["session-42"] and seen["openai-beta"] == ["assistants=v2"]
    for name in ("openai-organization", "anthropic-beta", "traceparent", "authorization", "x-tenant"):
        assert name not in seen, name


@pytest.mark.parametrize("model,status", [("ok", 200), ("stream", 200), ("bad", 400), ("busy", 503)])
def test_the_backends_response_headers_reach_the_client(gw: GatewayThread, model: str, status: int) -> None:
    got, headers, body = post(gw, model, stream=model == "stream")
    names = [n.lower() for n, _ in headers]
    values = {n.lower(): v for n, v in headers}
    assert got == status and values["openai-processing-ms"] == "12" and values["x-ratelimit-remaining-requests"] == "7"
    assert values["x-tokenrace-backend"] == "a" and values["x-request-id"] == "client-request-7"
    assert "keep-alive" not in names  # hop-by-hop: not passed on
    for once in ("date", "content-type", "x-request-id"):
        assert names.count(once) == 1, once
    assert ("content-length" in names) != ("transfer-encoding" in names)  # framed once, by the gateway
    if model == "stream":
        assert values["cache-control"] == "no-cache" and values["content-type"].startswith("text/event-stream")
        assert b"data: [DONE]" in body
    else:
        assert int(values["content-length"]) == len(body)


@pytest.mark.parametrize(
    "entry,problem",
    [
        ("Connection", "hop-by-hop"),
        ("transfer-encoding", "hop-by-hop"),
        ("Content-Length", "framing"),
        ("Authorization", "credentials"),
        ("x session", "not a header name"),
    ],
)
def test_forward_headers_naming_a_header_never_forwarded_is_a_located_error(entry: str, problem: str) -> None:
    routes = [{"model": "m", "backends": ["a"], "forward_headers": {"allow": ["x-session-id"], "deny": [entry]}}]
    text = config_text({"a": {"url": "http://127.0.0.1:9/v1"}}, routes)
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "test.yaml", ENV)
    line, row = next((i, row) for i, row in enumerate(text.splitlines(), 1) if entry in row)
    [found] = caught.value.problems
    assert (
        found.startswith(f"test.yaml:{line}:{row.index(entry) + 1}:")
        and "routes[0].forward_headers.deny[0]" in found
        and problem in found
    )
