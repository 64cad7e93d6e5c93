"""The gateway's own endpoints: /healthz, /metrics, /v1/models, /admin/state and the canary's controls.

The proxied endpoints are `admission.handle`; `app.build_handler` dispatches between the two.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tokenrace import __version__
from tokenrace.gateway import clock
from tokenrace.gateway.admission import Refused
from tokenrace.gateway.config import KVEventsConfig
from tokenrace.gateway.context import AdminContext
from tokenrace.gateway.http import Reply, Request, error_reply, json_reply
from tokenrace.gateway.kvblocks import InstanceBlocks
from tokenrace.gateway.runtime import Backend, Route, public
from tokenrace.gateway.shadow import summary as shadow_summary
from tokenrace.gateway.views import (
    BackendView,
    CanaryReply,
    ConfigView,
    GatewayState,
    KVEventsView,
    LoadView,
    RouteView,
    SharedView,
    View,
)

CANARY_PREFIX = "/admin/canary/"
CANARY_ACTIONS = ("pause", "resume", "promote", "rollback")


def state(gw: AdminContext) -> GatewayState:
    """The whole gateway's live state, for /admin/state."""
    now = clock.monotonic()
    rt = gw.runtime
    backends = {}
    for name, b in rt.backends.items():
        view = BackendView(
            url=b.public_url(),
            in_flight=b.in_flight,
            max_in_flight=b.config.max_in_flight,
            breaker=b.breaker.snapshot(now),
        )
        if b in rt.scraped:
            view.load = _load_state(b, now)
        if b.kv is not None and b.config.kv_events is not None:
            view.kv_events = _kv_state(b.kv, b.config.kv_events)
        backends[name] = view
    routes = {}
    for name, route in rt.routes.items():
        routes[name] = RouteView(
            targets=route.shares(),
            fallback=[t.label for t in route.fallback],
            sticky_header=route.sticky_header,
            canary=route.canary.snapshot(now, route.canary_target.label)
            if route.canary is not None and route.canary_target is not None
            else None,
            shadow=shadow_summary(route.shadow) if route.shadow is not None else None,
        )
    return GatewayState(
        version=__version__,
        pid=os.getpid(),
        started_unix=round(gw.started_unix, 3),
        draining=gw.draining,
        config=ConfigView(
            path=str(gw.path) if gw.path else None,
            generation=rt.generation,
            loaded_unix=round(rt.loaded_unix, 3),
            last_reload_error=gw.last_reload_error,
        ),
        state=gw.shared.summary() if gw.shared is not None else SharedView(backend="memory", up=None),
        backends=backends,
        routes=routes,
    )


def _load_state(backend: Backend, now: float) -> LoadView:
    """The latest /metrics reading of a scraped backend, with its age."""
    load = backend.load
    url, interval_s = public(backend.metrics_url()), backend.config.metrics.interval_s
    if load is None:
        return LoadView(url=url, interval_s=interval_s, reading=None)
    return LoadView(
        url=url,
        interval_s=interval_s,
        engine=load.engine,
        waiting=load.waiting,
        kv_usage=load.kv_usage,
        running=load.running,
        age_s=round(now - load.at, 3),
        error=load.error,
    )


def _kv_state(kv: InstanceBlocks, config: KVEventsConfig) -> KVEventsView:
    """What a backend's KV events taught the gateway, and how the stream is going."""
    return KVEventsView(
        endpoint=config.endpoint,
        topic=config.topic,
        blocks=len(kv),
        block_size=kv.block_size,
        batches=kv.batches,
        last_seq=kv.last_seq,
        gaps=kv.gaps,
        replayed=kv.replayed,
        missed=kv.missed,
        restarts=kv.restarts,
        cleared=kv.cleared,
        orphans=kv.orphans,
        skipped=kv.skipped,
        bad=kv.bad,
    )


def view_reply(view: View) -> Reply:
    """A typed answer, turned into JSON here at the edge."""
    return Reply(200, view.to_json())


def list_models(gw: AdminContext, request: Request) -> Reply:
    if gw.runtime.auth.identify(request.headers.get("authorization")) is None:
        gw.metrics.rejected.labels("unauthorized").inc()
        return Refused(401, "Missing or unknown API key.", "invalid_api_key", "unauthorized").reply()
    return view_reply(gw.runtime.models)


def healthz(gw: AdminContext, request: Request) -> Reply:
    if gw.draining:
        return json_reply({"status": "draining"}, status=503)
    now = clock.monotonic()
    open_ = sorted(n for n, b in gw.runtime.backends.items() if b.breaker.refresh(now) == "open")
    return json_reply({"status": "ok", "backends": len(gw.runtime.backends), "breakers_open": open_})


def metrics(gw: AdminContext, request: Request) -> Reply:
    return Reply(200, generate_latest(gw.metrics.registry), content_type=CONTENT_TYPE_LATEST)


def admin_state(gw: AdminContext, request: Request) -> Reply:
    denied = _admin_denied(gw, request, write=False)
    if denied is not None:
        return denied
    return view_reply(state(gw))


async def canary_control(gw: AdminContext, request: Request, path: str) -> Reply | None:
    """POST /admin/canary/...; None when the path names no canary action."""
    name, _, action = unquote(path[len(CANARY_PREFIX) :]).rpartition("/")
    if action not in CANARY_ACTIONS:
        return None
    return await admin_canary(gw, request, name or None, action)


async def admin_canary(gw: AdminContext, request: Request, name: str | None, action: str) -> Reply:
    """POST /admin/canary/{route}/{action} or /admin/canary/{action} (?route= or the only canary)."""
    denied = _admin_denied(gw, request, write=True)
    if denied is not None:
        return denied
    name = name or request.query.get("route")
    route = _canary_route(gw, name)
    if route is None:
        with_canary = sorted(n for n, r in gw.runtime.routes.items() if r.canary is not None)
        return error_reply(
            404,
            f"No canary route {name!r} (canaries: {', '.join(with_canary) or 'none'}).",
            "invalid_request_error",
            "not_found",
        )
    assert route.canary is not None and route.canary_target is not None
    try:
        decision = route.canary.admin(action, clock.monotonic())
    except ValueError as exc:
        return error_reply(409, str(exc), "invalid_request_error", "conflict")
    gw.on_decision(route.name, route.canary_target.label, decision)
    if gw.shared is not None:
        await gw.shared.decided(route, decision)  # every instance follows within one sync
    return view_reply(CanaryReply(route=route.name, decision=decision, canary=route.canary.snapshot(clock.monotonic())))


def _canary_route(gw: AdminContext, name: str | None) -> Route | None:
    routes = gw.runtime.routes
    if name is not None:
        route = routes.get(name)
        return route if route is not None and route.canary is not None else None
    with_canary = [r for r in routes.values() if r.canary is not None]
    return with_canary[0] if len(with_canary) == 1 else None


def _admin_denied(gw: AdminContext, request: Request, write: bool) -> Reply | None:
    """Admin writes need the admin key; reading state needs it too when one is configured."""
    auth = gw.runtime.auth
    if not auth.admin_configured:
        if not write:
            return None
        return error_reply(
            403, "No admin key is configured (admin: {key_env: ...}).", "permission_error", "admin_disabled"
        )
    if auth.is_admin(request.headers.get("authorization")):
        return None
    gw.metrics.rejected.labels("admin_unauthorized").inc()
    return error_reply(
        401, "Admin endpoints need 'Authorization: Bearer <admin key>'.", "authentication_error", "invalid_admin_key"
    )


PAGES: dict[str, Callable[[AdminContext, Request], Reply]] = {
    "/v1/models": list_models,
    "/healthz": healthz,
    "/metrics": metrics,
    "/admin/state": admin_state,
}
