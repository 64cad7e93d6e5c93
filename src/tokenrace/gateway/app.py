"""The gateway application: its lifecycle, reloads, canary ticks and breaker events.

`Gateway` owns what outlives one configuration (metrics, background tasks, the current `Runtime`)
and swaps runtimes on reload. `build_handler()` returns the request handler for `http.Server`: the
proxied completions (`admission`), else the gateway's own endpoints (`admin`). `server.serve()` runs it
with signals (SIGTERM drains, SIGHUP reloads).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tokenrace.gateway import admin, admission, clock
from tokenrace.gateway.breaker import STATE_CODES, Transition
from tokenrace.gateway.config import (
    ConfigError,
    GatewayConfig,
    Secret,
    Secrets,
    StateConfig,
    load_config,
    resolve_secrets,
)
from tokenrace.gateway.http import Handler, Reply, Request, Stream, error_reply
from tokenrace.gateway.metrics import GatewayMetrics, StateSnapshot
from tokenrace.gateway.runtime import Backend, Route, Runtime
from tokenrace.gateway.scrape import Scraper
from tokenrace.gateway.views import Decision
from tokenrace.redact import Redactor

if TYPE_CHECKING:
    from tokenrace.gateway.kvevents import KVEvents
    from tokenrace.gateway.shared import SharedState
    from tokenrace.gateway.telemetry import Tracing
from tokenrace.gateway.stream import Endpoint

log = logging.getLogger("tokenrace.gateway")
MIN_TICK_S = 0.05
CLOSE_TRIES = 5  # cancels of the background tasks on close, a second apart


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        secrets: Secrets,
        path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        local_state: tuple[StateConfig, Secret] | None = None,
    ) -> None:
        """`local_state`: the Redis to share state through when the file has no `state:` (the
        workers of one gateway share the supervisor's, see workers.py)."""
        self.path = Path(path) if path is not None else None
        self.local_state = local_state
        self.env = env
        self.metrics = GatewayMetrics()
        self.redact = Redactor(*secrets.values())
        self.runtime = Runtime(config, secrets, generation=1, on_move=self.metrics.affinity_moved)
        self.metrics.watch(self.snapshot)
        self.draining = False
        self.active: set[asyncio.Task[Any]] = set()  # handler tasks of proxied requests, for the drain
        self.started_unix = time.time()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._syncer: asyncio.Task[None] | None = None
        self.shared: SharedState | None = None  # Redis, with `state:` in the config
        self.last_reload_error: str | None = None
        self.scraper: Scraper | None = None  # made only when a least_queue pool needs one (imports aiohttp)
        self.kv_events: KVEvents | None = None  # made only when a backend has kv_events: (imports pyzmq)
        self.tracing: Tracing | None = None  # OpenTelemetry, imported only when the config turns it on
        self._follow_telemetry()

    # -- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        env = os.environ if self.env is None else self.env
        for backend in self.runtime.backends.values():
            backend.open(env)
        state, url = self.runtime.config.state, self.runtime.secrets.state_url
        if state is None and self.local_state is not None:
            state, url = self.local_state
        if state is not None and url is not None:
            # Imported only with `state:`: the redis package imports OpenTelemetry when it is installed.
            from tokenrace.gateway.shared import SharedState  # noqa: PLC0415 - optional dependency: redis (and OTel through it) only with `state:`

            self.shared = SharedState(state, url, self.warn, self.event, self.metrics.state_fallbacks.inc)
            await self.shared.sync(self.runtime, self.on_breaker_adopted)  # follow the others from the start
            self._syncer = asyncio.get_running_loop().create_task(self._sync_forever(self.shared))
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        self._follow_scrapes()

    async def close(self) -> None:
        pending = {t for t in (self._ticker, self._syncer) if t is not None} | self._tasks
        for _ in range(CLOSE_TRIES):
            for task in pending:
                task.cancel()
            if not pending:
                break
            # A cancel can be lost: one that lands as a Redis call's own timeout expires comes out
            # as that TimeoutError, which the loop catches and goes on. So cancel again if needed.
            _, pending = await asyncio.wait(pending, timeout=1.0)
        if self.scraper is not None:
            await self.scraper.close()
        if self.kv_events is not None:
            await self.kv_events.close()
        if self.tracing is not None:
            self.tracing.shutdown()
        if self.shared is not None:
            await self.shared.close()  # after its users stopped: the lease is released for the others
        for backend in self.runtime.backends.values():
            await backend.close()

    def _follow_scrapes(self) -> None:
        """Read the /metrics of the backends the current runtime's least_queue and scored pools
        need, and follow the KV events of the backends that publish them."""
        if self.scraper is None and self.runtime.scraped:
            self.scraper = Scraper()
        if self.scraper is not None:
            self.scraper.follow(self.runtime.scraped)
        if self.kv_events is None and self.runtime.kv_followed:
            from tokenrace.gateway.kvevents import KVEvents  # noqa: PLC0415 - optional dependency: pyzmq only with kv_events:

            self.kv_events = KVEvents()
        if self.kv_events is not None:
            self.kv_events.follow(self.runtime.kv_followed)

    def _follow_telemetry(self) -> None:
        """Start or stop the request spans as `telemetry.otel` says."""
        wanted = self.runtime.config.telemetry.otel
        if wanted and self.tracing is None:
            from tokenrace.gateway.telemetry import Tracing  # noqa: PLC0415 - optional dependency: OpenTelemetry only with `telemetry.otel`

            self.tracing = Tracing()  # OTEL_* come from the process environment, as exporters read them
        elif not wanted and self.tracing is not None:
            self.tracing.shutdown()
            self.tracing = None

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a background task, keeping a reference so it is not collected mid-flight."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- reload -----------------------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read the config file. In-flight requests finish on the old runtime. False if invalid."""
        if self.path is None:
            return False
        env = os.environ if self.env is None else self.env
        old = self.runtime
        try:
            config = load_config(self.path, env)
            secrets = resolve_secrets(config, env)
            new = Runtime(config, secrets, old.generation + 1, old, self.metrics.affinity_moved)
        except ConfigError as err:
            self.last_reload_error = "\n".join(err.problems)
            self.event("reload_failed", problems=err.problems)
            return False
        for backend in new.new_backends(old):
            backend.open(env)
        for secret in secrets.values():
            self.redact.add(secret)
        self.runtime = new
        self.last_reload_error = None
        self._follow_scrapes()
        self._follow_telemetry()
        if self.shared is not None:
            self.shared.reloaded()  # new backends adopt the shared breaker states on the next sync
        for backend in new.retired_backends(old):
            self.spawn(self._retire(backend, config.drain_s))
        if old.config.listen != config.listen:
            self.event("reload_listen_ignored", note="listen: changes need a restart")
        if old.config.state != config.state:
            self.event("reload_state_ignored", note="state: changes need a restart")
        self.event("reloaded", generation=new.generation, routes=list(new.routes), backends=list(new.backends))
        return True

    async def _retire(self, backend: Backend, drain_s: float) -> None:
        """Close a backend the new config dropped, once its last request ends."""
        give_up = time.monotonic() + drain_s
        while backend.in_flight > 0 and time.monotonic() < give_up:
            await asyncio.sleep(0.1)
        await backend.close()

    # -- canary and breaker events ------------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self._tick_interval())
            try:
                taken = self.tick(clock.monotonic())
                if self.shared is not None:
                    for route, decision in taken:
                        await self.shared.decided(route, decision)
            except Exception:  # a bug here must not stop every later canary decision
                log.exception("canary tick failed")

    async def _sync_forever(self, shared: SharedState) -> None:
        while True:
            await asyncio.sleep(shared.config.sync_interval_s)
            try:
                await shared.sync(self.runtime, self.on_breaker_adopted)
            except Exception:  # a bug here must not stop following the other instances
                log.exception("shared state sync failed")

    def _tick_interval(self) -> float:
        intervals = [r.canary.config.eval_interval_s for r in self.runtime.routes.values() if r.canary is not None]
        return max(MIN_TICK_S, min(intervals, default=1.0))

    def tick(self, now: float) -> list[tuple[Route, Decision]]:
        """Evaluate every canary once (the ticker calls this; tests may call it directly).

        With shared state, only the lease holder decides; the others evaluate their own window for
        /admin/state and follow the holder's decisions."""
        taken = []
        for route in self.runtime.routes.values():
            canary, target = route.canary, route.canary_target
            if canary is None or target is None:
                continue
            if self.shared is not None and not self.shared.decides(canary):
                canary.last_eval = canary.evaluate(now)
                continue
            open_reason = next(
                (f"{b.name}: {b.breaker.reason}" for b in target.backends if b.breaker.refresh(now) == "open"), None
            )
            decision = canary.tick(now, open_reason)
            if decision is not None:
                self.on_decision(route.name, target.label, decision)
                taken.append((route, decision))
        return taken

    def on_decision(self, route: str, backend: str, decision: Decision) -> None:
        self.metrics.canary_decisions.labels(route, decision.action).inc()
        self.event(
            "canary_" + decision.action,
            route=route,
            backend=backend,
            **decision.model_dump(by_alias=True, exclude_unset=True),
        )

    def on_breaker(self, backend: Backend, transition: Transition | None) -> None:
        if transition is None:
            return
        self.metrics.breaker_transitions.labels(backend.name, transition.new).inc()
        self.event("breaker_" + transition.new, backend=backend.name, old=transition.old, reason=transition.reason)
        if self.shared is not None and transition.new != "half_open":  # each instance probes for itself
            self.spawn(self.shared.write_breaker(backend, clock.monotonic(), clock.wall()))

    def on_breaker_adopted(self, backend: Backend, transition: Transition, by: str) -> None:
        """A breaker state another instance reached, now applied here."""
        self.metrics.breaker_transitions.labels(backend.name, transition.new).inc()
        self.event(
            "breaker_" + transition.new,
            backend=backend.name,
            old=transition.old,
            reason=transition.reason,
            shared_from=by,
        )

    def snapshot(self) -> StateSnapshot:
        """Live state for the scrape-time gauges."""
        now, wall = clock.monotonic(), clock.wall()
        breakers = {}
        for name, b in self.runtime.backends.items():
            state = b.breaker.refresh(now)
            until = b.breaker.open_until
            breakers[name] = (
                STATE_CODES[state],
                wall + (until - now) if state == "open" and until is not None else 0.0,
            )
        weights = {
            (r.name, r.canary_target.label): r.canary.weight
            for r in self.runtime.routes.values()
            if r.canary is not None and r.canary_target is not None
        }
        shared = self.shared
        if shared is None:
            return StateSnapshot(breakers, weights)
        return StateSnapshot(breakers, weights, float(shared.up is True), float(shared.leader))

    def event(self, kind: str, **fields: Any) -> None:
        """One JSON log line, scrubbed of every secret the gateway knows."""
        log.info("%s", self._line(kind, **fields))

    def warn(self, kind: str, **fields: Any) -> None:
        """event() at warning level: something an operator should look at."""
        log.warning("%s", self._line(kind, **fields))

    def _line(self, kind: str, /, **fields: Any) -> str:
        line = orjson.dumps({"event": kind, "t": round(time.time(), 3), **fields}, default=str).decode()
        return self.redact(line)


_POST: dict[str, Endpoint] = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


def build_handler(gw: Gateway) -> Handler:
    """The request handler for `http.Server`: the two proxied endpoints, then the gateway's own."""

    async def dispatch(request: Request) -> Reply | Stream | None:
        method, path = request.method, request.path
        if method == "POST":
            endpoint = _POST.get(path)
            if endpoint is not None:
                return await admission.handle(gw, request, endpoint)
            if path.startswith(admin.CANARY_PREFIX):
                reply = await admin.canary_control(gw, request, path)
                if reply is not None:
                    return reply
        elif method in ("GET", "HEAD"):
            page = admin.PAGES.get(path)
            if page is not None:
                return page(gw, request)
        return _no_route(method, path)

    return dispatch


def _no_route(method: str, path: str) -> Reply:
    allow = "GET, HEAD" if path in admin.PAGES else "POST" if path in _POST else None
    if allow is not None:
        return error_reply(
            405, f"{method} is not allowed on {path}.", "invalid_request_error", "method_not_allowed", {"Allow": allow}
        )
    return error_reply(404, f"Nothing is served at {method} {path[:200]}.", "invalid_request_error", "not_found")


def from_file(path: str | Path, env: Mapping[str, str] | None = None) -> Gateway:
    """A Gateway from a YAML file (raises ConfigError)."""
    environ = os.environ if env is None else env
    config = load_config(path, environ)
    return Gateway(config, resolve_secrets(config, environ), path, env)
