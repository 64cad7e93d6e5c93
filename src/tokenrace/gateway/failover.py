"""The order of attempts for one client request: retries on a backend, then the route's next target.

An attempt fails over (retry on the same backend with backoff, then the next backend) only while
nothing has reached the client. Every attempt's outcome is accounted once: breaker, canary sample,
attempt counter. When every try failed, the client gets the last backend's error, or a 502/503/504
of the gateway's own naming every backend tried.
"""

from __future__ import annotations

import asyncio
import random

from tokenrace.gateway import clock, routing
from tokenrace.gateway.attempt import Attempt, Done, Failure
from tokenrace.gateway.body import RequestBody
from tokenrace.gateway.canary import Sample
from tokenrace.gateway.context import ProxyContext
from tokenrace.gateway.http import Reply, Request, Stream, error_reply
from tokenrace.gateway.prompt_tokens import PromptTokenizer
from tokenrace.gateway.runtime import ArmName, Backend, Route, Runtime, Target
from tokenrace.gateway.shadow import run_shadow
from tokenrace.gateway.stream import Endpoint

monotonic = clock.monotonic  # the breakers' and canaries' clock


class Call:
    """One client request on its way through the route's backends."""

    def __init__(
        self,
        gw: ProxyContext,
        rt: Runtime,
        route: Route,
        endpoint: Endpoint,
        body: RequestBody,
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
        self.stream = body.stream
        self.client_wants_usage = body.wants_usage
        self._bodies: dict[str, bytes] = {}
        self.primary_text: asyncio.Future[str | None] | None = None
        self.first_attempt = True
        self.headers: dict[str, str] = {}
        self._forward = b""  # the client's headers that go on to a backend (headers.RequestFilter)
        self.attempts = 0  # requests sent to backends, retries and fallbacks included
        self.ttft_s: float | None = None  # of the attempt that answered, when it streamed
        self._tokens: tuple[PromptTokenizer, list[int] | None] | None = None

    def affinity_key(self, header: str | None, prefix_chars: int) -> str | None:
        """The key a prefix_affinity pool places this request by (runtime.KeySource)."""
        session = self.headers.get(header.lower()) if header else None
        return routing.affinity_key(session, self.body, prefix_chars)

    def prompt_tokens(self, tokenizer: PromptTokenizer) -> list[int] | None:
        """The prompt's token ids for a scored pool's prefix score (runtime.KeySource), made once."""
        if self._tokens is None or self._tokens[0] is not tokenizer:
            self._tokens = (tokenizer, tokenizer.tokens(self.body))
        return self._tokens[1]

    # -- the order of attempts ---------------------------------------------------------------------

    async def run(self, request: Request) -> Reply | Stream | None:
        route = self.route
        self.headers = request.headers
        pin = request.headers.get(route.pin_header) if route.pin_header else None
        self._forward = route.forward.lines(request.headers, route.own_headers)
        if pin is not None:
            pinned = route.pins.get(pin.strip())
            if pinned is None:
                self.primary_done(None)
                known = ", ".join(route.pins)
                message = f"{route.pin_header}: {pin!r} is no backend of `{route.name}` (it has: {known})."
                self.gw.metrics.child(self.gw.metrics.requests, route.name, "none", "400").inc()
                headers = {"x-request-id": self.request_id}
                return error_reply(400, message, "invalid_request_error", "unknown_backend", headers)
            # Pinned: that backend alone, retried as any, but no other tried instead; "fallback"
            # keeps it out of the canary's comparison.
            chain: list[tuple[Target, ArmName]] = [(pinned, "fallback")]
        else:
            sticky = request.headers.get(route.sticky_header.lower()) if route.sticky_header else None
            chain = route.plan(route.point(sticky))
        tokenizer = next((t for t in (target.tokenizes() for target, _ in chain) if t is not None), None)
        if tokenizer is not None:
            # Milliseconds for a long prompt: on a worker thread, off the event loop (prompt_tokens.py).
            tokens = await asyncio.get_running_loop().run_in_executor(None, tokenizer.tokens, self.body)
            self._tokens = (tokenizer, tokens)
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
        self.primary_done(None)
        if last.status is not None and last.body is not None:
            headers = dict(last.headers or {})  # the backend's own, less hop-by-hop and framing (headers.py)
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
        attempt = Attempt(self, request, backend, arm)
        try:
            result = await attempt.run()
        finally:
            backend.in_flight -= 1
            flight[key] -= 1
        self.ttft_s = attempt.ttft_s
        self._account(backend, arm, attempt, result, started)
        return result

    def _account(
        self, backend: Backend, arm: ArmName, attempt: Attempt, result: Done | Failure, started: float
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

    # -- what goes to a backend ------------------------------------------------------------------------

    def forwarded(self, backend: Backend) -> bytes:
        """The client's header lines for this backend (those its own `headers:` set are left out)."""
        if not backend.own_names:
            return self._forward
        return self.route.forward.lines(self.headers, backend.own_names | self.route.own_headers)

    def upstream_body(self, backend: Backend) -> bytes:
        """The body for this backend: its model name, and a request for usage in streams."""
        model = backend.model_for(self.route.name)
        cached = self._bodies.get(model)
        if cached is not None:
            return cached
        add_usage = self.stream and not self.client_wants_usage
        if model == self.route.name and not add_usage:
            out = self.raw  # nothing to change: send the client's bytes as they came
        else:
            out = self.body.for_backend(model, add_usage)
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
        self.gw.spawn(run_shadow(self.gw, self.route, shadow, self, self.primary_text))

    def primary_done(self, text: str | None) -> None:
        if self.primary_text is not None and not self.primary_text.done():
            self.primary_text.set_result(text)


def _status_for(kind: str) -> tuple[int, str]:
    if kind == "timeout":
        return 504, "upstream_timeout"
    if kind in ("breaker_open", "saturated", "unavailable"):
        return 503, "no_backend_available"
    return 502, "upstream_unavailable"
