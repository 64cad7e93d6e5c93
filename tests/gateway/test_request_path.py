"""Admission, failover and one attempt without a socket: an in-memory upstream and client connection
(tests/gateway/memory.py) take the place of the backends and the client."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import orjson

from tokenrace.gateway import admission
from tokenrace.gateway.config import parse_config, resolve_secrets
from tokenrace.gateway.http import Reply, Stream
from tokenrace.gateway.metrics import GatewayMetrics
from tokenrace.gateway.runtime import Backend, Runtime
from tokenrace.gateway.upstream import UpstreamError

from .helpers import CLIENT_KEY, ENV, config_text
from .memory import Answer, MemoryTransport, MemoryUpstream, client_request

if TYPE_CHECKING:
    from tokenrace.gateway.shared import SharedState
    from tokenrace.gateway.telemetry import Tracing

SSE = {"content-type": "text/event-stream"}
FAST_RETRY = {"attempts": 2, "backoff_ms": 1, "max_backoff_ms": 2}


class Context:
    """The running gateway as the request path sees it (context.ProxyContext), without a server."""

    def __init__(self, runtime: Runtime) -> None:
        self.metrics = GatewayMetrics()
        self.runtime = runtime
        self.active: set[asyncio.Task[Any]] = set()
        self.shared: SharedState | None = None
        self.tracing: Tracing | None = None
        self.draining = False
        self.breaker_events: list[Any] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.get_running_loop().create_task(coro)

    def on_breaker(self, backend: Backend, transition: Any) -> None:
        self.breaker_events.append((backend.name, transition))

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))


def gateway(
    routes: list[dict[str, Any]], timeouts: dict[str, float] | None = None, **upstreams: MemoryUpstream
) -> Context:
    backends = {name: {"url": f"http://{name}.invalid/v1", "timeouts": timeouts or {}} for name in upstreams}
    config = parse_config(config_text(backends, routes, retry=FAST_RETRY), "test.yaml", ENV)
    runtime = Runtime(config, resolve_secrets(config, ENV), generation=1)
    for name, upstream in upstreams.items():
        runtime.backends[name].attach(upstream)
    return Context(runtime)


def chat(stream: bool = True, **extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra})


def event(text: str) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def stream_answer(n: int, size: int = 1, **kw: Any) -> Answer:
    return Answer(200, dict(SSE), [event("x" * size) for _ in range(n)] + [b"data: [DONE]\n\n"], **kw)


async def send(
    gw: Context, body: bytes, key: str | None = CLIENT_KEY, **headers: str
) -> tuple[Reply | Stream | None, MemoryTransport]:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request, transport = client_request(body, headers)
    return await admission.handle(gw, request, "chat"), transport


def sample(gw: Context, name: str, **labels: str) -> float:
    value = gw.metrics.registry.get_sample_value(name, labels)
    return value if value is not None else 0.0


# --- admission --------------------------------------------------------------------------------------


def test_admission_refuses_before_any_backend_is_asked() -> None:
    async def main() -> None:
        up = MemoryUpstream()
        gw = gateway([{"model": "m", "backends": ["a"]}], a=up)
        for body, key, status in [
            (chat(), None, 401),
            (chat(), "wrong-key-0123456789", 401),
            (b"{not json", CLIENT_KEY, 400),
            (b"[1]", CLIENT_KEY, 400),
            (orjson.dumps({"model": "other", "messages": []}), CLIENT_KEY, 404),
            (orjson.dumps({"model": "m", "stream": "yes"}), CLIENT_KEY, 400),
        ]:
            reply, _ = await send(gw, body, key)
            assert isinstance(reply, Reply) and reply.status == status, (body, reply)
        assert up.sent == [] and not gw.active

    asyncio.run(main())


# --- failover ---------------------------------------------------------------------------------------


def test_a_failing_backend_is_retried_then_the_next_target_answers() -> None:
    async def main() -> None:
        a = MemoryUpstream(Answer(503, pieces=[b'{"error":{"message":"busy"}}']), Answer(500, pieces=[b"{}"]))
        b = MemoryUpstream(Answer(200, pieces=[b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}']))
        gw = gateway([{"model": "m", "backends": ["a"], "fallback": ["b"]}], a=a, b=b)
        reply, _ = await send(gw, chat(stream=False))
        assert isinstance(reply, Reply) and reply.status == 200 and reply.headers["x-tokenrace-backend"] == "b"
        assert len(a.sent) == 2 and len(b.sent) == 1  # two tries on a, then b
        assert sample(gw, "tokenrace_gateway_upstream_attempts_total", route="m", backend="a", outcome="5xx") == 2
        assert (
            sample(gw, "tokenrace_gateway_tokens_total", route="m", backend="b", direction="out", source="usage") == 5
        )

    asyncio.run(main())


def test_connect_errors_fall_back_and_the_last_backend_error_reaches_the_client() -> None:
    async def main() -> None:
        refused = UpstreamError("connect", "cannot connect")
        a = MemoryUpstream(Answer(refuse=refused), Answer(refuse=refused))
        b = MemoryUpstream(*[Answer(429, {"retry-after": "30", "content-type": "application/json"}, [b'{"e":1}'])] * 2)
        gw = gateway([{"model": "m", "backends": ["a"], "fallback": ["b"]}], a=a, b=b)
        reply, _ = await send(gw, chat(stream=False))
        assert isinstance(reply, Reply) and reply.status == 429 and reply.body == b'{"e":1}'
        assert reply.headers["Retry-After"] == "30"  # too long to wait for: passed on, not retried
        assert len(a.sent) == 2 and len(b.sent) == 1

    asyncio.run(main())


# --- one attempt ------------------------------------------------------------------------------------


def test_a_stream_is_forwarded_event_for_event_and_ended() -> None:
    async def main() -> None:
        up = MemoryUpstream(stream_answer(5))
        gw = gateway([{"model": "m", "backends": ["a"]}], a=up)
        answer, client = await send(gw, chat())
        assert isinstance(answer, Stream) and answer.ended
        written = bytes(client.written)
        assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.endswith(b"0\r\n\r\n")
        assert written.count(b'"content":"x"') == 5 and b"data: [DONE]" in written
        assert b'"include_usage":true' in up.sent[0].body  # the gateway asks for usage to count tokens

    asyncio.run(main())


def test_a_backend_failing_mid_stream_ends_it_with_an_error_event() -> None:
    async def main() -> None:
        up = MemoryUpstream(stream_answer(5, fail_after=3))
        gw = gateway([{"model": "m", "backends": ["a"]}], a=up)
        answer, client = await send(gw, chat())
        written = bytes(client.written)
        assert isinstance(answer, Stream) and answer.ended
        assert b'"finish_reason":"error"' in written and written.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert sample(gw, "tokenrace_gateway_stream_errors_total", route="m", backend="a", kind="disconnect") == 1

    asyncio.run(main())


async def until(condition: Any, turns: int = 10_000) -> None:
    """Let the loop run until `condition()` holds (a bounded number of turns, no sleeping)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def test_a_slow_reader_pauses_the_upstream_and_nothing_piles_up() -> None:
    async def main() -> None:
        up = MemoryUpstream(stream_answer(400, size=1024))  # ~420 KiB of events
        gw = gateway([{"model": "m", "backends": ["a"]}], a=up)
        request, client = client_request(chat(), {"Authorization": f"Bearer {CLIENT_KEY}"})
        client.hold()
        task = asyncio.get_running_loop().create_task(admission.handle(gw, request, "chat"))
        await until(lambda: bool(up.responses) and up.responses[0].paused)
        resp = up.responses[0]
        held = client.buffered
        assert resp.left > 300  # the upstream was not read on
        assert held < 2 * client.high  # the client's buffer stopped at the high water mark (plus one event)
        for _ in range(100):
            await asyncio.sleep(0)
        assert client.buffered == held and resp.paused  # and stays there while the client reads nothing
        client.release()
        answer = await task
        assert isinstance(answer, Stream) and answer.ended and resp.pauses == 1
        assert bytes(client.written).count(b'"content":"') == 400

    asyncio.run(main())


def test_a_client_that_leaves_while_behind_releases_the_backend() -> None:
    async def main() -> None:
        up = MemoryUpstream(stream_answer(400, size=1024))
        gw = gateway([{"model": "m", "backends": ["a"]}], a=up)
        request, client = client_request(chat(), {"Authorization": f"Bearer {CLIENT_KEY}"})
        client.hold()
        task = asyncio.get_running_loop().create_task(admission.handle(gw, request, "chat"))
        await until(lambda: bool(up.responses) and up.responses[0].paused)
        client.leave()
        await task
        assert gw.runtime.backends["a"].in_flight == 0 and up.responses[0].closed
        assert sample(gw, "tokenrace_gateway_requests_total", route="m", backend="a", status="499") == 1

    asyncio.run(main())


def test_the_idle_limit_applies_from_the_first_read_even_when_it_held_several_events() -> None:
    async def main() -> None:
        # The first read brings two events, then the backend goes quiet: no later read restarts
        # the idle clock, so it must have started with the first one.
        first_read = event("a") + event("b")
        up = MemoryUpstream(Answer(200, dict(SSE), [first_read], stall=True))
        gw = gateway([{"model": "m", "backends": ["a"]}], timeouts={"idle_s": 0.2, "first_byte_s": 60}, a=up)
        answer, client = await asyncio.wait_for(send(gw, chat()), 10)
        written = bytes(client.written)
        assert isinstance(answer, Stream) and written.count(b'"content":"') == 2
        assert b'"code":"timeout_idle"' in written and written.endswith(b"0\r\n\r\n")

    asyncio.run(main())
