"""Admission of a request to /v1/chat/completions or /v1/completions, before any backend.

`handle` checks the client's key and rate limit, the body and the route (each refusal is a `Refused`
the gateway answers itself, 4xx with an OpenAI error body), then hands the request to a
`failover.Call`. It also keeps the handler task in the set the drain waits for.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
import uuid

from tokenrace.gateway import clock
from tokenrace.gateway.body import BadBody, RequestBody
from tokenrace.gateway.context import ProxyContext
from tokenrace.gateway.failover import Call
from tokenrace.gateway.http import Reply, Request, Stream, error_reply
from tokenrace.gateway.ratelimit import TokenBucket
from tokenrace.gateway.runtime import Route, Runtime
from tokenrace.gateway.stream import Endpoint

perf_ns = time.perf_counter_ns
monotonic = clock.monotonic  # the breakers' and buckets' clock


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


def _draining(gw: ProxyContext) -> bool:
    # Read afresh: the drain can start while a request awaits its backend (a direct read after the
    # check at the top of handle() would be narrowed to False by the type checker).
    return gw.draining


async def handle(gw: ProxyContext, request: Request, endpoint: Endpoint) -> Reply | Stream | None:
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


async def _handle(request: Request, endpoint: Endpoint, gw: ProxyContext, t0: int) -> Reply | Stream | None:
    rt = gw.runtime
    try:
        client = await _client(gw, rt, request)
        body = _body(request.body)
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


async def _client(gw: ProxyContext, rt: Runtime, request: Request) -> str:
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


async def _throttle(gw: ProxyContext, bucket: TokenBucket, client: str) -> float | None:
    """Seconds until the client may go on (None: now): from the shared bucket when Redis answers."""
    shared = gw.shared
    if shared is not None and shared.up:
        answered, wait = await shared.take(client, bucket.rate, bucket.capacity)
        if answered:
            return wait
    return bucket.take(monotonic())


def _body(raw: bytes) -> RequestBody:
    """The request's JSON object (the server has already held its size and time to the limits)."""
    try:
        return RequestBody.parse(raw)
    except BadBody as bad:
        raise Refused(400, str(bad), bad.code, "bad_request") from None


def _route(rt: Runtime, body: RequestBody) -> Route:
    model = body.model
    if model is None:
        raise Refused(400, "`model` is required and must be a string.", "missing_model", "bad_request")
    route = rt.routes.get(model)
    if route is None:
        known = ", ".join(sorted(rt.routes))
        raise Refused(
            404, f"The model `{model[:200]}` does not exist here (served: {known}).", "model_not_found", "unknown_model"
        )
    if not body.stream_valid:
        raise Refused(400, "`stream` must be true or false.", "invalid_stream", "bad_request")
    return route


_ID_PREFIX = f"gw-{uuid.uuid4().hex[:12]}-"
_ids = itertools.count(1)


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id")
    if given and len(given) <= 128 and given.isprintable():
        return given
    return f"{_ID_PREFIX}{next(_ids):x}"  # unique per process start; cheaper than a uuid per request
