"""The HTTP transport: one pooled keep-alive aiohttp session whose connections stamp sends and arrivals.

The send: aiohttp writes a request's headers and body from a task of its own, one event-loop turn or
more after the caller asked for it, in one transport write (headers and a bytes body coalesced). Its
request-chunk-sent trace signal fires just before that write: the client stamps the send there (see
openai.py). The write is one `send()` to the kernel, which takes the whole request unless its buffer
is full; the transport's write-buffer high-water mark is 0, so that a write the kernel did not take
whole pauses the protocol, and `resume_writing()` says when the last byte reached the kernel (a long
prompt on a full socket): then that is the send. A stamp taken after the write instead would be late
by whatever the OS ran first: on loopback the server, woken by the request, often runs before the
client resumes (0.1-0.8 ms here, with the server holding the request before the client's stamp).

aiohttp hands body bytes to the reader one event-loop turn after the socket delivered them; under
load that turn can be long (other streams are being parsed). To time bytes when they arrive, before
any parsing, the connection protocol records `perf_counter_ns()` in `data_received` together with
the payload's byte count. The reader maps each parsed SSE event back to the arrival of its last
byte. If aiohttp's internals ever change shape, stamping switches itself off and the reader falls
back to stamping when it receives the bytes (`arrival_clock` says which was used).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

perf_ns = time.perf_counter_ns


class StampingHandler(ResponseHandler):
    """Stamps when the request's writes returned and whether they had to drain, and records (payload
    bytes so far, arrival ns) for the response being read on this connection."""

    def __init__(self, loop: Any) -> None:
        super().__init__(loop=loop)
        self.rx_payload: object | None = None
        self.rx: list[tuple[int, int]] = []
        self.written_ns: int | None = None  # the request's writes returned
        self.drained_ns: int | None = None  # ... and, when the kernel did not take them whole, they drained
        self._drained_ns: int | None = None

    def data_received(self, data: bytes) -> None:
        # The arrival stamp: taken before aiohttp parses anything, paired with the body's byte count.
        t = perf_ns()
        super().data_received(data)
        payload = self._payload
        if payload is None:
            return
        if payload is not self.rx_payload:
            self.rx_payload = payload
            self.rx = []
        self.rx.append((payload.total_bytes, t))

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=0)

    def pause_writing(self) -> None:
        self._drained_ns = None
        super().pause_writing()

    def resume_writing(self) -> None:
        self._drained_ns = perf_ns()
        super().resume_writing()

    def start_timeout(self) -> None:
        # aiohttp calls this once the request's last write (and its drain) returned.
        self.written_ns = perf_ns()
        self.drained_ns = self._drained_ns
        self._drained_ns = None
        super().start_timeout()


def _install_stamping(connector: aiohttp.TCPConnector) -> bool:
    factory = getattr(connector, "_factory", None)
    if not isinstance(factory, functools.partial) or factory.func is not ResponseHandler:
        return False
    # A private attribute (checked above): setattr keeps the type checker from pinning it to ResponseHandler.
    setattr(connector, "_factory", functools.partial(StampingHandler, **factory.keywords))  # noqa: B010
    return True


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds; None means no limit."""

    connect: float | None = 10.0
    first_byte: float | None = 120.0
    idle: float | None = 60.0
    total: float | None = 600.0


async def _on_conn_start(session: Any, ctx: Any, params: Any) -> None:
    ctx.connect_start_ns = perf_ns()


async def _on_chunk_sent(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if rec is not None:
        rec.write_ns = perf_ns()


async def _on_conn_end(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if rec is not None:
        rec.connect_ns = perf_ns() - ctx.connect_start_ns
        rec.new_connection = True


def _trace_config() -> aiohttp.TraceConfig:
    tc = aiohttp.TraceConfig()
    tc.on_connection_create_start.append(_on_conn_start)
    tc.on_connection_create_end.append(_on_conn_end)
    tc.on_request_chunk_sent.append(_on_chunk_sent)
    return tc


def make_session(limit: int, timeouts: Timeouts) -> tuple[aiohttp.ClientSession, bool]:
    """A session with `limit` pooled keep-alive connections. Returns (session, stamping_enabled)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=60, ttl_dns_cache=300)
    stamping = _install_stamping(connector)
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect, connect=None),
        trace_configs=[_trace_config()],
        auto_decompress=False,
        # Ask for identity so that bytes are timed as they are sent, not after a decompressor.
        headers={"Accept-Encoding": "identity"},
        read_bufsize=2**16,
    )
    return session, stamping
