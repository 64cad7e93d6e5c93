"""The pass-through proxy for /v1/chat/completions and /v1/completions.

One `Call` per client request: check the key and the body, pick a route, then try backends in the
route's order. An attempt fails over (retry on the same backend with backoff, then the next backend)
only while nothing has reached the client. For streams the response is committed at the first
forwarded event; from then on each upstream read is written to the client as soon as it arrives
(see `stream.StreamTap` for the exact cut), and a backend that fails ends the stream with an error
event (`stream.error_event`), never with a silent clean end.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import logging
import math
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tokenrace.client.openai import error_message_from_body
from tokenrace.gateway import routing
from tokenrace.gateway.canary import Sample
from tokenrace.gateway.http import Reply, Request, Stream, error_reply
from tokenrace.gateway.metrics import GatewayMetrics
from tokenrace.gateway.ratelimit import TokenBucket
from tokenrace.gateway.runtime import ArmName, Backend, Route, Runtime, Target
from tokenrace.gateway.stream import Endpoint, StreamTap, error_event
from tokenrace.gateway.upstream import Response, UpstreamError
from tokenrace.gateway.watchdog import Watchdog

if TYPE_CHECKING:
    from tokenrace.gateway.app import Gateway

perf_ns = time.perf_counter_ns
monotonic = time.monotonic
log = logging.getLogger("tokenrace.gateway")
SSE_TYPE = "text/event-stream"
MAX_ERROR_BODY = 64 * 1024
CLIENT_LEFT = ("client_left", "the client left or stopped reading")
HIGH_WATER = 64 * 1024  # bytes queued for a client before upstream reading pauses (then client_write_s bounds the wait)
LOW_WATER = 16 * 1024  # ... and resumes
_HEADER_CASE = {"retry-after": "Retry-After", "content-type": "Content-Type"}  # backend headers passed on with errors


# --- answers the gateway gives itself ---------------------------------------------------------


class Refused(Exception):
    """A request the gateway answers itself, before any backend: 4xx with an OpenAI error body."""

    def __init__(
        self, status: int, message: str, code: str, reason: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.reason, self.headers = status, code, reason, headers

    def reply(self) -> Reply:
        type_ = {401: "authentication_error", 429: "rate_limit_error"}.get(self.status, "invalid_request_error")
        return error_reply(self.status, str(self), type_, self.code, self.headers)


# --- outcomes of one attempt --------------------------------------------------------------------


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


# --- the call -------------------------------------------------------------------------------------


def _draining(gw: Gateway) -> bool:
    # Read afresh: the drain can start while a request awaits its backend (a direct read after the
    # check at the top of handle() would be narrowed to False by the type checker).
    return gw.draining


async def handle(gw: Gateway, request: Request, endpoint: Endpoint) -> Reply | Stream | None:
    t0 = perf_ns()
    if gw.draining:
        return error_reply(
            503,
            "The gateway is shutting down; retry on another instance.",
            "server_error",
            "gateway_shutdown",
            {"Connection": "close", "Retry-After": "1"},
        )
    task = asyncio.current_task()
    assert task is not None
    gw.active.add(task)
    try:
        return await _handle(request, endpoint, gw, t0)
    except asyncio.CancelledError:
        if not _draining(gw) or task.cancelling() > 1:
            raise
        task.uncancel()  # the drain ran out while this request waited for its backend
        return error_reply(
            503,
            "The gateway shut down before a backend answered.",
            "server_error",
            "gateway_shutdown",
            {"Connection": "close"},
        )
    finally:
        gw.active.discard(task)


async def _handle(request: Request, endpoint: Endpoint, gw: Gateway, t0: int) -> Reply | Stream | None:
    rt = gw.runtime
    try:
        client = await _client(gw, rt, request)
        body = _json_body(request.body)
        route = _route(rt, body)
    except Refused as refused:
        gw.metrics.child(gw.metrics.rejected, refused.reason).inc()
        reply = refused.reply()
        if gw.tracing is not None:
            gw.tracing.request(
                t0_ns=t0, path=request.path, status=reply.status, route=None, backend=None,
                attempts=0, ttft_s=None, stream=False, request_id=None,
            )  # fmt: skip
        return reply
    gw.metrics.child(gw.metrics.client_requests, client).inc()
    call = Call(gw, rt, route, endpoint, body, request.body, t0, _request_id(request))
    response = await call.run(request)
    # A log line and a span per request are both off by default (they cost on the hot path).
    if rt.config.log.requests or gw.tracing is not None:
        status, backend = (
            (response.status, response.headers.get("x-tokenrace-backend")) if response is not None else (499, None)
        )
        if gw.tracing is not None:
            gw.tracing.request(
                t0_ns=t0, path=request.path, status=status, route=route.name, backend=backend,
                attempts=call.attempts, ttft_s=call.ttft_s, stream=call.stream, request_id=call.request_id,
            )  # fmt: skip
        if rt.config.log.requests:
            gw.event(
                "request",
                request_id=call.request_id,
                client=client,
                route=route.name,
                stream=call.stream,
                backend=backend,
                status=status,
                duration_ms=round((perf_ns() - t0) / 1e6, 3),
            )
    return response


async def _client(gw: Gateway, rt: Runtime, request: Request) -> str:
    client = rt.auth.identify(request.headers.get("authorization"))
    if client is None:
        raise Refused(
            401, "Missing or unknown API key. Send 'Authorization: Bearer <key>'.", "invalid_api_key", "unauthorized"
        )
    bucket = rt.auth.bucket(client)
    wait = await _throttle(gw, bucket, client) if bucket is not None else None
    if wait is not None:
        retry = str(max(1, math.ceil(wait)))
        raise Refused(
            429,
            f"Rate limit of this API key reached; retry in {retry} s.",
            "rate_limit_exceeded",
            "rate_limited",
            {"Retry-After": retry},
        )
    return client


async def _throttle(gw: Gateway, bucket: TokenBucket, client: str) -> float | None:
    """Seconds until the client may go on (None: now): from the shared bucket when Redis answers."""
    shared = gw.shared
    if shared is not None and shared.up:
        answered, wait = await shared.take(client, bucket.rate, bucket.capacity)
        if answered:
            return wait
    return bucket.take(monotonic())


def _json_body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object (the server has already held its size and time to the limits)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Refused(400, f"The body is not valid JSON: {exc}", "invalid_json", "bad_request") from None
    if not isinstance(body, dict):
        raise Refused(400, "The body must be a JSON object.", "invalid_body", "bad_request")
    return body


def _route(rt: Runtime, body: dict[str, Any]) -> Route:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Refused(400, "`model` is required and must be a string.", "missing_model", "bad_request")
    route = rt.routes.get(model)
    if route is None:
        known = ", ".join(sorted(rt.routes))
        raise Refused(
            404, f"The model `{model[:200]}` does not exist here (served: {known}).", "model_not_found", "unknown_model"
        )
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise Refused(400, "`stream` must be true or false.", "invalid_stream", "bad_request")
    return route


_ID_PREFIX = f"gw-{uuid.uuid4().hex[:12]}-"
_ids = itertools.count(1)


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id")
    if given and len(given) <= 128 and given.isprintable():
        return given
    return f"{_ID_PREFIX}{next(_ids):x}"  # unique per process start; cheaper than a uuid per request


class Call:
    """One client request on its way through the route's backends."""

    def __init__(
        self,
        gw: Gateway,
        rt: Runtime,
        route: Route,
        endpoint: Endpoint,
        body: dict[str, Any],
        raw: bytes,
        t0: int,
        request_id: str,
    ) -> None:
        self.gw = gw
        self.rt = rt
        self.route = route
        self.endpoint = endpoint
        self.body = body
        self.raw = raw
        self.t0 = t0
        self.request_id = request_id
        self.stream = body.get("stream") is True
        options = body.get("stream_options")
        self.client_wants_usage = isinstance(options, dict) and options.get("include_usage") is True
        self._bodies: dict[str, bytes] = {}
        self.primary_text: asyncio.Future[str | None] | None = None
        self.first_attempt = True
        self.headers: dict[str, str] = {}
        self.attempts = 0  # requests sent to backends, retries and fallbacks included
        self.ttft_s: float | None = None  # of the attempt that answered, when it streamed

    def affinity_key(self, header: str | None, prefix_chars: int) -> str | None:
        """The key a prefix_affinity pool places this request by (runtime.KeySource)."""
        session = self.headers.get(header.lower()) if header else None
        return routing.affinity_key(session, self.body, prefix_chars)

    # -- the order of attempts ---------------------------------------------------------------------

    async def run(self, request: Request) -> Reply | Stream | None:
        route = self.route
        self.headers = request.headers
        sticky = request.headers.get(route.sticky_header.lower()) if route.sticky_header else None
        chain = route.plan(route.point(sticky))
        self._maybe_shadow()
        failures: list[tuple[str, Failure]] = []
        previous: str | None = None
        for target, arm in chain:
            outcome, used = await self._try_target(request, target, arm, failures, previous)
            if isinstance(outcome, Done):
                return outcome.response
            if outcome is not None:  # a failure the retry policy does not cover: the client gets it
                return self._give_up(request, [(used or target.label, outcome)])
            previous = used or target.label
        return self._give_up(request, failures)

    async def _try_target(
        self, request: Request, target: Target, arm: ArmName, failures: list[tuple[str, Failure]], previous: str | None
    ) -> tuple[Done | Failure | None, str | None]:
        """Up to `attempts` tries on one target. Returns Done, a final Failure, or None to move on."""
        retry = self.route.retry
        tried: set[str] = set()
        used: str | None = None
        for attempt in range(retry.attempts):
            backend, why = target.pick(tried, monotonic(), self)
            if backend is None:
                self.gw.metrics.child(
                    self.gw.metrics.attempts, self.route.name, target.label, why or "unavailable"
                ).inc()
                failures.append((target.label, Failure(why or "unavailable", f"{target.label}: {why}")))
                return None, used
            if previous is not None and attempt == 0:
                self.gw.metrics.child(self.gw.metrics.fallbacks, self.route.name, previous, backend.name).inc()
            if attempt > 0:
                self.gw.metrics.pair(self.route.name, backend.name).retries.inc()
            used = backend.name
            tried.add(backend.name)
            result = await self._attempt(request, backend, arm)
            if isinstance(result, Done):
                return result, used
            failures.append((backend.name, result))
            if result.kind not in retry.on:
                return result, used
            wait = self._backoff(attempt, result)
            if wait is None or attempt + 1 >= retry.attempts:
                return None, used
            await asyncio.sleep(wait)
        return None, used

    def _backoff(self, attempt: int, failure: Failure) -> float | None:
        """Seconds before the next try on this backend; None: go to the next backend instead."""
        retry = self.route.retry
        if failure.retry_after_s is not None and failure.retry_after_s > retry.retry_after_max_s:
            return None
        base = min(retry.max_backoff_ms, retry.backoff_ms * 2.0**attempt) / 1000.0
        wait = base / 2 + random.random() * base / 2  # "equal jitter": spread retries, keep a floor
        return max(wait, failure.retry_after_s or 0.0)

    def _give_up(self, request: Request, failures: list[tuple[str, Failure]]) -> Reply:
        """Every try failed before a byte reached the client: pass the last backend error on."""
        m = self.gw.metrics
        name, last = failures[-1] if failures else ("none", Failure("unavailable", "no backend"))
        self._primary_done(None)
        if last.status is not None and last.body is not None:
            headers = {k: v for k, v in (last.headers or {}).items() if k.lower() in ("retry-after", "content-type")}
            headers["x-request-id"] = self.request_id
            headers["x-tokenrace-backend"] = name
            m.child(m.requests, self.route.name, name, str(last.status)).inc()
            return Reply(last.status, last.body, headers, content_type=None)
        status, code = _status_for(last.kind)
        tried = "; ".join(f"{n}: {f.message}" for n, f in failures[-4:])
        m.child(m.requests, self.route.name, "none", str(status)).inc()
        headers = {"x-request-id": self.request_id}
        if status == 503:
            headers["Retry-After"] = "1"
        return error_reply(
            status, f"No backend could serve `{self.route.name}` ({tried}).", "upstream_error", code, headers
        )

    # -- one attempt ---------------------------------------------------------------------------------

    async def _attempt(self, request: Request, backend: Backend, arm: ArmName) -> Done | Failure:
        flight = self.gw.metrics.in_flight
        key = (self.route.name, backend.name)
        backend.in_flight += 1
        flight[key] = flight.get(key, 0) + 1
        started = monotonic()
        self.attempts += 1
        attempt = _Attempt(self, request, backend, arm)
        try:
            result = await attempt.run()
        finally:
            backend.in_flight -= 1
            flight[key] -= 1
        self.ttft_s = attempt.ttft_s
        self._account(backend, arm, attempt, result, started)
        return result

    def _account(
        self, backend: Backend, arm: ArmName, attempt: _Attempt, result: Done | Failure, started: float
    ) -> None:
        """Breaker, canary samples and attempt counters: one verdict per attempt on the backend."""
        now = monotonic()
        verdict = attempt.verdict if isinstance(result, Done) else result.kind
        self.gw.metrics.child(self.gw.metrics.attempts, self.route.name, backend.name, verdict).inc()
        if verdict in ("client_closed", "shutdown"):  # no verdict on the backend
            backend.breaker.release_probe()
            return
        ok = verdict in ("ok", "client_error")
        self.gw.on_breaker(backend, backend.breaker.record(ok, now, verdict))
        canary = self.route.canary
        if canary is not None and arm in ("canary", "baseline") and verdict != "client_error":
            e2e = (now - started) if ok else None
            canary.record(arm, Sample(now, ok, attempt.ttft_s if ok else None, attempt.tpot_s if ok else None, e2e))

    # -- bodies ---------------------------------------------------------------------------------------

    def upstream_body(self, backend: Backend) -> bytes:
        """The body for this backend: its model name, and a request for usage in streams."""
        model = backend.model_for(self.route.name)
        cached = self._bodies.get(model)
        if cached is not None:
            return cached
        if model == self.route.name and (not self.stream or self.client_wants_usage):
            out = self.raw  # nothing to change: send the client's bytes as they came
        else:
            body = dict(self.body)
            body["model"] = model
            if self.stream and not self.client_wants_usage:
                options = body.get("stream_options")
                body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
            out = orjson.dumps(body)
        self._bodies[model] = out
        return out

    # -- shadow ----------------------------------------------------------------------------------------

    def _maybe_shadow(self) -> None:
        shadow = self.route.shadow
        if shadow is None or random.random() >= shadow.config.share:
            return
        if shadow.in_flight >= shadow.config.max_in_flight:
            self.gw.metrics.shadow_requests.labels(self.route.name, shadow.backend.name, "skipped_busy").inc()
            return
        self.primary_text = asyncio.get_running_loop().create_future()
        from tokenrace.gateway.shadow import run_shadow  # imported late: the shadow is off the hot path

        self.gw.spawn(run_shadow(self.gw, self.route, shadow, self, self.primary_text))

    def _primary_done(self, text: str | None) -> None:
        if self.primary_text is not None and not self.primary_text.done():
            self.primary_text.set_result(text)


def _status_for(kind: str) -> tuple[int, str]:
    if kind == "timeout":
        return 504, "upstream_timeout"
    if kind in ("breaker_open", "saturated", "unavailable"):
        return 503, "no_backend_available"
    return 502, "upstream_unavailable"


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


class _Attempt:
    """One request to one backend, and (if it succeeds) the response to the client."""

    __slots__ = ("call", "request", "backend", "arm", "verdict", "ttft_s", "tpot_s", "wd")

    def __init__(self, call: Call, request: Request, backend: Backend, arm: ArmName) -> None:
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
        data = call.upstream_body(backend)
        if call.first_attempt:
            call.first_attempt = False
            call.gw.metrics.request_overhead.observe((perf_ns() - call.t0) / 1e9)
        self.wd = wd = Watchdog(t.first_byte_s, t.idle_s, t.total_s)
        resp: Response | None = None
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

    async def _http_error(self, resp: Response) -> Done | Failure:
        body = await resp.read_all(MAX_ERROR_BODY)
        headers = {_HEADER_CASE[k]: v for k, v in resp.headers.items() if k in _HEADER_CASE}
        message = f"HTTP {resp.status}: {error_message_from_body(body) or ''}"
        if resp.status == 429 or resp.status >= 500:
            kind = "429" if resp.status == 429 else "5xx"
            return Failure(kind, message, resp.status, body, headers, retry_after_s(resp.headers.get("retry-after")))
        # Any other 4xx is the request's fault, not the backend's: pass it on as it is.
        self.verdict = "client_error"
        self.call._primary_done(None)
        out = Reply(
            resp.status,
            body,
            {**headers, "x-request-id": self.call.request_id, "x-tokenrace-backend": self.backend.name},
            content_type=None,
        )
        m = self.call.gw.metrics
        m.child(m.requests, self.call.route.name, self.backend.name, str(resp.status)).inc()
        return Done(out)

    async def _whole(self, resp: Response) -> Done | Failure:
        """Non-streaming: read it all (still retryable), then pass it on as it is."""
        call = self.call
        body = await resp.read_all()
        now = perf_ns()
        usage, text = _usage_and_text(body, call.endpoint, call.primary_text is not None)
        call._primary_done(text)
        out = Reply(
            resp.status,
            body,
            {
                "Content-Type": resp.headers.get("content-type", "application/json"),
                "x-request-id": call.request_id,
                "x-tokenrace-backend": self.backend.name,
            },
        )
        m = call.gw.metrics
        pair = m.pair(call.route.name, self.backend.name)
        pair.duration.observe((now - call.t0) / 1e9)
        m.child(m.requests, call.route.name, self.backend.name, str(resp.status)).inc()
        _count_tokens(m, call.route.name, self.backend.name, usage, None)
        return Done(out)

    # -- streaming ---------------------------------------------------------------------------------------

    async def _stream(self, resp: Response) -> Done | Failure:
        call = self.call
        tap = StreamTap(call.endpoint, strip_usage=not call.client_wants_usage, keep_text=call.primary_text is not None)
        out = b""
        tap_ns = 0
        # Until the first complete event nothing has reached the client: a failure here is retryable.
        while not out:
            chunk = await resp.read()
            if not chunk:
                return Failure("disconnect", "the backend closed the stream before its first event")
            t = perf_ns()
            out = tap.feed(chunk, t)
            tap_ns = perf_ns() - t
        t = perf_ns()
        transport = self.request.transport
        if transport is None or transport.is_closing():
            return self._client_left(None)
        client = self.request.start_stream(
            200,
            {
                "Content-Type": resp.headers.get("content-type", SSE_TYPE),
                "Cache-Control": "no-cache",
                "x-request-id": call.request_id,
                "x-tokenrace-backend": self.backend.name,
            },
        )
        client.write(out)
        call.gw.metrics.first_chunk_overhead.observe((perf_ns() - t + tap_ns) / 1e9)
        return await self._pump(resp, client, tap)

    async def _pump(self, resp: Response, client: Stream, tap: StreamTap) -> Done:
        """Forward the rest of the stream; end it with an error event if the backend fails.

        Push mode: each upstream read is tapped and written to the client transport inside the
        upstream protocol's callback (`_sink`), so no task wakes up per chunk. This task waits only
        for the end, an upstream error or timeout, or a client that fell behind (then it waits for
        the client, at most client_write_s, with upstream reading paused).
        """
        transport = self.request.transport
        if transport is None or transport.is_closing():
            return self._client_left(client)
        sink = _Sink(self, client, tap)
        resp.stream_into(sink)
        failure = await self._wait_out(resp, sink, transport)
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

    async def _wait_out(self, resp: Response, sink: _Sink, transport: asyncio.BaseTransport) -> tuple[str, str] | None:
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
                    while transport.get_write_buffer_size() > LOW_WATER and not transport.is_closing():  # type: ignore[attr-defined]
                        await asyncio.sleep(0.005)
                if transport.is_closing():
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
        if self.request.transport is not None:
            self.request.transport.abort()
        self.verdict = "client_closed"
        call._primary_done(None)
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
        _count_tokens(m, route, name, tap.usage, (tokens, source))
        if failure is not None:
            m.child(m.stream_errors, route, name, failure[0]).inc()
            m.child(m.requests, route, name, "stream_error").inc()
            call._primary_done(None)
            return
        if tap.upstream_error is not None:
            self.verdict = "stream_upstream_error"
        m.child(m.requests, route, name, "200").inc()
        call._primary_done(tap.text() if tap.keep_text else None)


class _Sink:
    """Called by the upstream protocol with each read: tap it, write it to the client at once."""

    __slots__ = ("transport", "write", "tap", "read", "observe", "stopped", "client_gone", "sent")

    def __init__(self, attempt: _Attempt, client: Stream, tap: StreamTap) -> None:
        assert attempt.wd is not None
        self.transport = client.transport
        self.write = client.write
        self.tap = tap
        self.read = attempt.wd.reading
        self.observe = attempt.call.gw.metrics.chunk_overhead.observe
        self.stopped = False
        self.client_gone = False
        self.sent = 0

    def __call__(self, piece: bytes) -> bool:
        """Returns False to pause upstream reading: the client is behind, gone, or we stopped."""
        if self.stopped:
            return False
        self.read()  # bytes came: the idle limit starts over
        t = perf_ns()
        out = self.tap.feed(piece, t)
        if not out:
            return True
        transport = self.transport
        if transport.is_closing():
            self.client_gone = True
            return False
        self.write(out)
        self.sent += 1
        if self.sent & 7 == 0:  # every 8th chunk: the histogram's own cost stays off most chunks
            self.observe((perf_ns() - t) / 1e9)
        return bool(transport.get_write_buffer_size() <= HIGH_WATER)


def _count_tokens(
    m: GatewayMetrics, route: str, backend: str, usage: dict[str, Any] | None, counted: tuple[int | None, str] | None
) -> None:
    prompt = usage.get("prompt_tokens") if usage else None
    if isinstance(prompt, int):
        m.child(m.tokens, route, backend, "in", "usage").inc(prompt)
    if counted is not None:
        tokens, source = counted
        if tokens:
            m.child(m.tokens, route, backend, "out", source).inc(tokens)
        return
    completion = usage.get("completion_tokens") if usage else None
    if isinstance(completion, int):
        m.child(m.tokens, route, backend, "out", "usage").inc(completion)


def _usage_and_text(body: bytes, endpoint: Endpoint, want_text: bool) -> tuple[dict[str, Any] | None, str | None]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    if not want_text:
        return usage, None
    return usage, response_text(obj, endpoint)


def response_text(obj: dict[str, Any], endpoint: Endpoint) -> str | None:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    first = choices[0]
    if endpoint == "chat":
        message = first.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else None
    text = first.get("text")
    return text if isinstance(text, str) else None
