"""What `bench --monitor` and soak runs add to a bench run, in two calls for BenchSession:

    monitor = monitor_for_bench(directory, endpoint.base_url, endpoint.provider, t0_ns, interval_s, metrics_url)
    await monitor.start()            # after the run directory exists, before the load starts
    ...
    resources = await monitor.stop()  # in the finally, before the summary is written
    enrich_summary(summary, resources, monitor, runner.records, t0_ns, load.duration_s)

`enrich_summary` also adds soak drift for `--duration` of 5 minutes or more, with or without the
monitor (latency and errors alone then), and the engine's clock (`server_vs_client`) from the
vLLM/SGLang histograms when the responses did not carry llama.cpp timings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tokenrace.client.providers import PROVIDERS
from tokenrace.client.records import RequestRecord
from tokenrace.figures.drift import drift, is_soak
from tokenrace.figures.engine_clock import from_metrics_delta
from tokenrace.monitor.advice import resource_warnings
from tokenrace.monitor.server import is_local_url, metrics_url_for
from tokenrace.monitor.session import MonitorSession, load_timeseries

# Hosted APIs have no /metrics for their customers: do not knock on it every run.
HOSTED = frozenset({"groq", "openai", "together", "openrouter", "fireworks"})
HOSTED_HOSTS = frozenset(urlsplit(PROVIDERS[p].base_url).hostname for p in HOSTED if p in PROVIDERS)


def discover_metrics_url(base_url: str, provider: str | None) -> str | None:
    """`http://host:port/metrics` for a self-hosted server; None for a hosted API."""
    if (provider or "").lower() in HOSTED or urlsplit(base_url).hostname in HOSTED_HOSTS:
        return None
    return metrics_url_for(base_url)


def monitor_for_bench(
    directory: Path,
    base_url: str,
    provider: str | None,
    t0_ns: int,
    interval_s: float = 1.0,
    metrics_url: str | None = None,
) -> MonitorSession:
    """A monitor whose samples share the run's t0 (timeseries `t_ms` lines up with records'
    `start_ms`). `metrics_url` overrides discovery."""
    return MonitorSession(
        directory,
        interval_s,
        metrics_url or discover_metrics_url(base_url, provider),
        t0_ns=t0_ns,
        local_server=is_local_url(base_url),
    )


def enrich_summary(
    summary: dict[str, Any],
    resources: dict[str, Any] | None,
    monitor: MonitorSession | None,
    records: Sequence[RequestRecord],
    t0_ns: int,
    duration_s: float | None,
) -> None:
    """Add `resources`, `resource_warnings`, `drift` (soak runs) and, from /metrics,
    `server_vs_client` to a bench summary, in place. Never raises on odd data."""
    if resources is not None:
        summary["resources"] = resources
        summary["resource_warnings"] = resource_warnings(resources, summary)
    if is_soak(duration_s):
        timeseries = load_timeseries(monitor.directory) if monitor is not None else None
        summary["drift"] = drift(records, timeseries, None, t0_ns)
    if monitor is not None and "server_vs_client" not in summary:
        svc = _server_clock(summary, monitor)
        if svc is not None:
            summary["server_vs_client"] = svc


def _server_clock(summary: dict[str, Any], monitor: MonitorSession) -> dict[str, Any] | None:
    engine, first, last = monitor.server_metrics_texts()
    if engine is None or not first or not last or first is last:
        return None
    metrics = summary.get("metrics") or {}
    ttft = (metrics.get("ttft_ms") or {}).get("mean")
    tpot = (metrics.get("tpot_ms") or {}).get("mean")
    try:
        return from_metrics_delta(engine, first, last, ttft, tpot)
    except ValueError:  # a scrape that parsed once and not twice: leave the comparison out
        return None
