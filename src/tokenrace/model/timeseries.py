"""timeseries.jsonl: one monitor sample per line (tokenrace.monitor writes it; docs/monitor.md
defines each figure). Every figure is None when its sampler was off or failed."""

from __future__ import annotations

from tokenrace.model.base import _Model


class GpuSample(_Model):
    """One GPU at one sample (NVML, or the DCGM exporter)."""

    index: int | None = None
    name: str | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle: list[str] | None = None  # active slow-down reasons; None when NVML cannot tell


class SystemSample(_Model):
    """This machine and the client's own process at one sample."""

    cpu_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    net_rx_bytes_per_s: float | None = None
    net_tx_bytes_per_s: float | None = None
    net_loopback_bytes_per_s: float | None = None
    proc_cpu_pct: float | None = None
    proc_rss_bytes: int | None = None


class ServerSample(_Model):
    """The serving engine's /metrics at one sample."""

    engine: str | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    preemptions_total: float | None = None
    ttft_mean_ms: float | None = None
    tpot_mean_ms: float | None = None
    scrape_ms: float | None = None


class TimeseriesSample(_Model):
    """One line of timeseries.jsonl: ms since the run's t0, the wall clock, and each sampler's figures."""

    t_ms: float | None = None
    wall: str | None = None
    gpu: list[GpuSample] | None = None
    system: SystemSample | None = None
    server: ServerSample | None = None
