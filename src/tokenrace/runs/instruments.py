"""The monitor around a bench run: which /metrics to scrape, and a monitor that shares the run's t0.

monitor = monitor_for_bench(directory, endpoint.base_url, endpoint.provider, t0_ns, interval_s, metrics_url)
await monitor.start()            # after the run directory exists, before the load starts
...
resources = await monitor.stop()  # in the finally; the summary builder takes it as context
"""

from __future__ import annotations

from pathlib import Path

from tokenrace.client.providers import hosted_provider
from tokenrace.monitor.server import is_local_url, metrics_url_for
from tokenrace.monitor.session import MonitorSession


def discover_metrics_url(base_url: str, provider: str | None) -> str | None:
    """`http://host:port/metrics` for a self-hosted server; None for a hosted API, which has no
    /metrics for its customers (do not knock on it every run)."""
    if hosted_provider(base_url, provider) is not None:
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
