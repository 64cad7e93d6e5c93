"""What the request path needs of the gateway around it, as protocols.

The proxy, the shadow and the gateway's own endpoints (admin.py) are handed these rather than the
whole `Gateway`, so they do not import the application module that imports them, and a test can
hand them something smaller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tokenrace.gateway.breaker import Transition
    from tokenrace.gateway.metrics import GatewayMetrics
    from tokenrace.gateway.runtime import Backend, Runtime
    from tokenrace.gateway.shared import SharedState
    from tokenrace.gateway.stream import Endpoint
    from tokenrace.gateway.telemetry import Tracing
    from tokenrace.gateway.views import Decision


class ProxyContext(Protocol):
    """The running gateway, as the proxy sees it."""

    metrics: GatewayMetrics
    runtime: Runtime
    active: set[asyncio.Task[Any]]  # handler tasks of proxied requests, for the drain
    shared: SharedState | None
    tracing: Tracing | None
    draining: bool

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    def on_breaker(self, backend: Backend, transition: Transition | None) -> None: ...

    def event(self, kind: str, **fields: Any) -> None: ...


class ShadowCall(Protocol):
    """The client request a shadow copies."""

    request_id: str
    endpoint: Endpoint
    stream: bool

    def upstream_body(self, backend: Backend) -> bytes: ...

    def forwarded(self, backend: Backend) -> bytes: ...


class AdminContext(Protocol):
    """The running gateway, as its own endpoints see it: /healthz, /metrics, /v1/models, /admin/*."""

    metrics: GatewayMetrics
    runtime: Runtime
    shared: SharedState | None
    draining: bool
    started_unix: float  # wall clock
    path: Path | None  # the config file, when it came from one
    last_reload_error: str | None

    def on_decision(self, route: str, backend: str, decision: Decision) -> None: ...
