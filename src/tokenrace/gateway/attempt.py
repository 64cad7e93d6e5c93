"""One request to one backend, and (if it succeeds) the response to the client.

An attempt returns `Done` (the client has its answer, whole or streamed) or a `Failure` that
`failover` may retry. For streams the response is committed at the first forwarded event; from then
on each upstream read is written to the client as soon as it arrives (see `stream.StreamTap` for the
exact cut), and a backend that fails ends the stream with an error event (`stream.error_event`),
never with a silent clean end. Tokens are counted here, from usage or from the stream's events.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import orjson

from tokenrace.client.openai import error_message_from_body
from tokenrace.gateway.context import ProxyContext
from tokenrace.gateway.headers import response_headers
from tokenrace.gateway.http import Reply, Request, Stream
from tokenrace.gateway.metrics import GatewayMetrics
from tokenrace.gateway.runtime import ArmName, Backend, Route, Runtime
from tokenrace.gateway.stream import Endpoint, StreamTap, Usage, error_event, whole_response
from tokenrace.gateway.upstream import UpstreamError, UpstreamResponse
from tokenrace.gateway.watchdog import Watchdog

perf_ns = time.perf_counter_ns
log = logging.getLogger("tokenrace.gateway")
SSE_TYPE = "text/event-stream"
MAX_ERROR_BODY = 64 * 1024
CLIENT_LEFT = ("client_left", "the client left or stopped reading")
STREAM_OWN = frozenset(("cache-control",))  # set by the gateway on a stream it passes on


class Caller(Protocol):
    """What an attempt needs of the client request it serves (`failover.Call`)."""

    gw: ProxyContext
    rt: Runtime
    route: Route
    endpoint: Endpoint
    t0: int
    request_id: str
    stream: bool
    client_wants_usage: bool
    first_attempt: bool
    primary_text: asyncio.Future[str | None] | None

    def upstream_body(self, backend: Backend) -> bytes: ...

    def forwarded(self, backend: Backend) -> bytes: ...

    def primary_done(self, text: str | None) -> None: ...


@dataclass(slots=True)
class Failure:
    """An attempt that did not produce a response the client can have (yet)."""

    kind: str  # connect | disconnect | 429 | 5xx | timeout | breaker_open | saturated
    message: str
    status: int | None = None
    body: bytes | None = None
    headers: dict[str, str] | None = None
    retry_after_s: float | None = None


class Done:
    """The attempt answered the client (fully, or with a stream that ended one way or another)."""

    __slots__ = ("response",)

    def __init__(self, response: Reply | Stream | None) -> None:  # None: the client's connection was dropped
        self.response = response


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Attempt:
    """One request to one backend, and (if it succeeds) the response to the client."""

    __slots__ = ("call", "request", "backend", "arm", "verdict", "ttft_s", "tpot_s", "wd")

    def __init__(self, call: Caller, request: Request, backend: Backend, arm: ArmName) -> None:
        self.call = call
        self.request = request
        self.backend = backend
        self.arm = arm
        self.verdict = "ok"
        self.ttft_s: float | None = None
        self.tpot_s: float | None = None
        self.wd: Watchdog | None = None

    async def run(self) -> Done | Failure:
        call, backend = self.call, self.backend
        t = backend.config.timeouts
        pool = backend.pool
        assert pool is not None
        accept = b"Accept: text/event-stream\r\n" if call.stream else b"Accept: application/json\r\n"
        extra = b"x-request-id: " + call.request_id.encode("latin-1", "replace") + b"\r\n" + accept
        extra += call.forwarded(backend)
        data = call.upstream_body(backend)
        if call.first_attempt:
            call.first_attempt = False
            call.gw.metrics.request_overhead.observe((perf_ns() - call.t0) / 1e9)
        self.wd = wd = Watchdog(t.first_byte_s, t.idle_s, t.total_s)
        resp: UpstreamResponse | None = None
        try:
            resp = await pool.request(backend.heads[call.endpoint], extra, data)
            if resp.status >= 400:
                return await self._http_error(resp)
            if call.stream and resp.content_type == SSE_TYPE:
                return await self._stream(resp)
            return await self._whole(resp)
        except asyncio.CancelledError:
            limit = wd.expired()
            if limit is None:
                raise
            return self._timeout_failure(limit)
        except UpstreamError as exc:
            if exc.kind == "connect":
                return Failure("connect", str(exc))
            return Failure("disconnect", f"connection lost before the response ended ({exc})")
        finally:
            wd.stop()
            if resp is not None:
                resp.close()  # a finished response's connection goes back to the pool

    def _timeout_failure(self, limit: str) -> Failure:
        t = self.backend.config.timeouts
        seconds = {"first_byte": t.first_byte_s, "idle": t.idle_s, "total": t.total_s}.get(limit)
        return Failure(
            "timeout",
            f"no answer within the {limit.replace('_', '-')} limit of {seconds:g} s" if seconds else f"{limit} timeout",
        )

    async def _http_error(self, resp: UpstreamResponse) -> Done | Failure:
        body = await resp.read_all(MAX_ERROR_BODY)
        headers = response_headers(resp.headers)
        message = f"HTTP {resp.status}: {error_message_from_body(body) or ''}"
        if resp.status == 429 or resp.status >= 500:
            kind = "429" if resp.status == 429 else "5xx"
            return Failure(kind, message, resp.status, body, headers, retry_after_s(resp.headers.get("retry-after")))
        # Any other 4xx is the request's fault, not the backend's: pass it on as it is.
        self.verdict = "client_error"
        self.call.primary_done(None)
        out = Reply(
            resp.status,
            body,
            headers | {"x-request-id": self.call.request_id, "x-tokenrace-backend": self.backend.name},
            content_type=None,
        )
        m = self.call.gw.metrics
        m.child(m.requests, self.call.route.name, self.backend.name, str(resp.status)).inc()
        return Done(out)

    async def _whole(self, resp: UpstreamResponse) -> Done | Failure:
        """Non-streaming: read it all (still retryable), then pass it on as it is."""
        call = self.call
        body = await resp.read_all()
        now = perf_ns()
        usage, text = whole_response(body, call.endpoint, call.primary_text is not None)
        call.primary_done(text)
        headers = response_headers(resp.headers)
        headers.setdefault("Content-Type", "application/json")
        headers["x-request-id"] = call.request_id
        headers["x-tokenrace-backend"] = self.backend.name
        out = Reply(resp.status, body, headers, content_type=None)
        m = call.gw.metrics
        pair = m.pair(call.route.name, self.backend.name)
        pair.duration.observe((now - call.t0) / 1e9)
        m.child(m.requests, call.route.name, self.backend.name, str(resp.status)).inc()
        count_tokens(m, call.route.name, self.backend.name, usage, None)
        return Done(out)

    # -- streaming ---------------------------------------------------------------------------------------

    async def _stream(self, resp: UpstreamResponse) -> Done | Failure:
        call = self.call
        tap = StreamTap(call.endpoint, strip_usage=not call.client_wants_usage, keep_text=call.primary_text is not None)
        out = b""
        tap_ns = 0
        # Until the first complete event nothing has reached the client: a failure here is retryable.
        wd = self.wd
        assert wd is not None
        while not out:
            chunk = await resp.read()
            if not chunk:
                return Failure("disconnect", "the backend closed the stream before its first event")
            wd.reading()  # bytes came: from now on the idle limit, not the first-byte one, applies
            t = perf_ns()
            out = tap.feed(chunk, t)
            tap_ns = perf_ns() - t
        t = perf_ns()
        if self.request.client_gone:
            return self._client_left(None)
        headers = response_headers(resp.headers, STREAM_OWN)
        headers.setdefault("Content-Type", SSE_TYPE)
        headers["Cache-Control"] = "no-cache"
        headers["x-request-id"] = call.request_id
        headers["x-tokenrace-backend"] = self.backend.name
        client = self.request.start_stream(200, headers, out)
        call.gw.metrics.first_chunk_overhead.observe((perf_ns() - t + tap_ns) / 1e9)
        return await self._pump(resp, client, tap)

    async def _pump(self, resp: UpstreamResponse, client: Stream, tap: StreamTap) -> Done:
        """Forward the rest of the stream; end it with an error event if the backend fails.

        Push mode: each upstream read is tapped and written to the client inside the upstream
        protocol's callback (`_Sink`), so no task wakes up per chunk. This task waits only for the
        end, an upstream error or timeout, or a client that fell behind: its connection's flow
        control paused writing, so upstream reading pauses too until the client drained (at most
        client_write_s).
        """
        if client.closed:
            return self._client_left(client)
        sink = _Sink(self, client, tap)
        resp.stream_into(sink)
        failure = await self._wait_out(resp, sink, client)
        sink.stopped = True  # whatever still arrives is not the client's any more
        if failure is not None and failure[0] == "client_left":
            return self._client_left(client)
        if failure is None:
            tap.close()
            if not tap.done:
                failure = ("truncated", "the backend ended the stream without [DONE]")
        if failure is not None:
            await self._end_with_error(client, tap, failure[1], failure[0])
        else:
            client.end()
        self._finish(tap, failure)
        return Done(client)

    async def _wait_out(self, resp: UpstreamResponse, sink: _Sink, client: Stream) -> tuple[str, str] | None:
        """Wait for the stream to end. None: it ended; else (code, message), code "client_left" included."""
        wd = self.wd
        assert wd is not None
        write_s = self.call.rt.config.limits.client_write_s
        while True:
            try:
                if await resp.wait_sink() == "done":
                    return None
                if sink.client_gone:
                    return CLIENT_LEFT
                wd.hold()  # the client is behind: wait for it, not for the backend
                async with asyncio.timeout(write_s):
                    await client.drain()
                if client.closed:
                    return CLIENT_LEFT
                wd.reading()
                resp.resume()
            except TimeoutError:
                return CLIENT_LEFT
            except asyncio.CancelledError:
                limit = wd.expired()
                if limit is None:
                    if not self._shutting_down():
                        raise
                    return ("gateway_shutdown", "the gateway is shutting down")
                return ("timeout_" + limit, f"the backend sent nothing within the {limit.replace('_', '-')} limit")
            except UpstreamError as exc:
                return ("disconnect", str(exc))

    def _shutting_down(self) -> bool:
        """A cancel from the drain (not from a timeout): absorb it so the stream can be closed cleanly."""
        task = asyncio.current_task()
        if not self.call.gw.draining or task is None:
            return False
        task.uncancel()
        return True

    async def _end_with_error(self, client: Stream, tap: StreamTap, message: str, code: str) -> None:
        """The contract for a stream that breaks after bytes reached the client (docs/gateway.md)."""
        text = message if code == "gateway_shutdown" else f"backend '{self.backend.name}' failed mid-stream: {message}"
        client.write(error_event(tap, text, code, self.call.request_id))  # a no-op if the client left too
        client.end()
        self.verdict = (
            "shutdown" if code == "gateway_shutdown" else code if code.startswith("timeout") else "stream_" + code
        )
        log.warning(
            "%s",
            orjson.dumps(
                {
                    "event": "stream_error",
                    "route": self.call.route.name,
                    "backend": self.backend.name,
                    "code": code,
                    "message": message,
                    "request_id": self.call.request_id,
                }
            ).decode(),
        )

    def _client_left(self, client: Stream | None) -> Done:
        """The client closed, or stopped reading for client_write_s: drop its connection for good
        (never let a clean chunked end follow, which would read as a complete answer)."""
        call = self.call
        self.request.abort()
        self.verdict = "client_closed"
        call.primary_done(None)
        m = call.gw.metrics
        m.child(m.client_disconnects, call.route.name, self.backend.name).inc()
        m.child(m.requests, call.route.name, self.backend.name, "499").inc()
        return Done(client)

    def _finish(self, tap: StreamTap, failure: tuple[str, str] | None) -> None:
        call = self.call
        m = call.gw.metrics
        name, route = self.backend.name, call.route.name
        pair = m.pair(route, name)
        now = perf_ns()
        if tap.first_token_ns is not None:
            self.ttft_s = (tap.first_token_ns - call.t0) / 1e9
            pair.ttft.observe(self.ttft_s)
        self.tpot_s = tap.tpot_s()
        if self.tpot_s is not None:
            pair.tpot.observe(self.tpot_s)
        pair.duration.observe((now - call.t0) / 1e9)
        tokens, source = tap.output_tokens()
        count_tokens(m, route, name, tap.usage, (tokens, source))
        if failure is not None:
            m.child(m.stream_errors, route, name, failure[0]).inc()
            m.child(m.requests, route, name, "stream_error").inc()
            call.primary_done(None)
            return
        if tap.upstream_error is not None:
            self.verdict = "stream_upstream_error"
        m.child(m.requests, route, name, "200").inc()
        call.primary_done(tap.text() if tap.keep_text else None)


class _Sink:
    """Called by the upstream protocol with each piece of a read: tapped at once, and what is
    complete goes to the client in one write when the read is parsed (`flush`)."""

    __slots__ = ("flow", "write", "tap", "read", "observe", "stopped", "client_gone", "sent", "out")

    def __init__(self, attempt: Attempt, client: Stream, tap: StreamTap) -> None:
        assert attempt.wd is not None
        self.flow = client.flow
        self.write = client.write
        self.tap = tap
        self.read = attempt.wd.reading
        self.observe = attempt.call.gw.metrics.chunk_overhead.observe
        self.stopped = False
        self.client_gone = False
        self.sent = 0
        self.out = b""  # complete events of this read, not written yet

    def __call__(self, piece: bytes) -> bool:
        """Returns False to pause upstream reading: we stopped."""
        if self.stopped:
            return False
        self.read()  # bytes came: the idle limit starts over
        t = perf_ns()
        out = self.tap.feed(piece, t)
        if out:
            self.out = self.out + out if self.out else out
            self.sent += 1
            if self.sent & 7 == 0:  # every 8th chunk: the histogram's own cost stays off most chunks
                self.observe((perf_ns() - t) / 1e9)
        return True

    def flush(self) -> bool:
        """The read is parsed: write what it completed. False to pause upstream reading: the
        client is behind (its flow control paused writing), gone, or we stopped."""
        out = self.out
        if out:
            self.out = b""
            if not self.write(out):
                self.client_gone = True
                return False
        return not self.stopped and not self.flow.paused  # the write just made may have paused it


def count_tokens(
    m: GatewayMetrics, route: str, backend: str, usage: Usage | None, counted: tuple[int | None, str] | None
) -> None:
    prompt = usage.prompt_tokens if usage is not None else None
    if prompt is not None:
        m.child(m.tokens, route, backend, "in", "usage").inc(prompt)
    if counted is not None:
        tokens, source = counted
        if tokens:
            m.child(m.tokens, route, backend, "out", source).inc(tokens)
        return
    completion = usage.completion_tokens if usage is not None else None
    if completion is not None:
        m.child(m.tokens, route, backend, "out", "usage").inc(completion)
