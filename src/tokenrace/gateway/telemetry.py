"""OpenTelemetry: one span per proxied request (the `otel` extra). Off by default.

This module is imported only when the config says `telemetry: {otel: true}`; a gateway without it
never imports OpenTelemetry and pays one `is None` test per request. The span is made when the
response has ended (streams included), with the start moved back to the moment the request
arrived, so the hot path carries no open span.

The exporter follows the standard environment: `OTEL_TRACES_EXPORTER` (default `otlp`; `console`;
`none`; several, comma-separated) names exporters registered by installed packages (the
`opentelemetry_traces_exporter` entry points: the SDK brings `console`,
opentelemetry-exporter-otlp-proto-http or -grpc bring `otlp`), which read their own
`OTEL_EXPORTER_OTLP_*` settings; `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the
service (default `tokenrace-gateway`); `OTEL_BSP_*` tune the batch processor; `OTEL_SDK_DISABLED`
turns it all off. When a tracer provider is already installed (e.g. under `opentelemetry-instrument`)
the gateway uses that one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from importlib.metadata import entry_points

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tokenrace import __version__
from tokenrace.errors import UsageError

EXPORTER_GROUP = "opentelemetry_traces_exporter"


class Tracing:
    """Makes the request spans. `provider` None: the installed one, or one built from OTEL_*."""

    def __init__(self, provider: trace.TracerProvider | None = None, env: Mapping[str, str] | None = None) -> None:
        self._own = provider is None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        if provider is None:
            provider = (
                provider_from_env(os.environ if env is None else env) if self._own else trace.get_tracer_provider()
            )
        self.provider = provider
        self.tracer = provider.get_tracer("tokenrace.gateway", __version__)

    def request(
        self,
        *,
        t0_ns: int,
        path: str,
        status: int,
        route: str | None,
        backend: str | None,
        attempts: int,
        ttft_s: float | None,
        stream: bool,
        request_id: str | None,
    ) -> None:
        """One finished request. t0_ns: perf_counter_ns() when it arrived."""
        start = time.time_ns() - (time.perf_counter_ns() - t0_ns)
        attributes: dict[str, str | int | float | bool] = {
            "http.request.method": "POST",
            "url.path": path,
            "http.response.status_code": status,
            "tokenrace.attempts": attempts,
            "tokenrace.stream": stream,
        }
        if route is not None:
            attributes["tokenrace.route"] = route
            attributes["gen_ai.request.model"] = route
        if backend is not None:
            attributes["tokenrace.backend"] = backend
        if ttft_s is not None:  # undefined (not streamed, or no token came) is left out, never 0
            attributes["tokenrace.ttft_ms"] = round(ttft_s * 1000.0, 3)
        if request_id is not None:
            attributes["tokenrace.request_id"] = request_id
        span = self.tracer.start_span(f"POST {path}", kind=SpanKind.SERVER, start_time=start, attributes=attributes)
        if status >= 500 or status == 499:
            span.set_status(Status(StatusCode.ERROR, "client left" if status == 499 else f"HTTP {status}"))
        span.end()

    def shutdown(self) -> None:
        """Flush and stop a provider this gateway made (an installed one belongs to its owner)."""
        if self._own and isinstance(self.provider, TracerProvider):
            self.provider.shutdown()


def provider_from_env(env: Mapping[str, str]) -> TracerProvider:
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "tokenrace-gateway"}
    provider = TracerProvider(resource=Resource.create(attributes))
    for exporter in exporters_from_env(env):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def exporters_from_env(env: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters OTEL_TRACES_EXPORTER names (default otlp). Raises UsageError for a missing one."""
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    found = {e.name: e for e in entry_points(group=EXPORTER_GROUP)}
    out: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        entry = found.get(name)
        if entry is None:
            hint = " (pip install opentelemetry-exporter-otlp-proto-http)" if name.startswith("otlp") else ""
            known = ", ".join(sorted(found)) or "none"
            raise UsageError(
                f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides{hint}; installed: {known}"
            )
        out.append(entry.load()())
    return out
