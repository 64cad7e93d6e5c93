"""The monitor's saved shapes: timeseries.jsonl lines, the resource summary and the manifest's monitor.

One `TimeseriesLine` per sample (tokenrace/monitor writes them; figures/drift and the HTML report
read them back through `monitor.load_timeseries`). `Resources` is the summary of the samples: the
`resources` of summary.json, and `resources.json` of `tokenrace monitor` (`ResourcesFile`, with the
command's own three keys). `MonitorSettings` is manifest.json's `monitor`. Every figure is defined
in docs/monitor.md; a figure its sampler could not read is None, never 0.

Gauges and peaks keep the JSON number type they were read as (`float | int`): a queue length of 12
is written as 12, a utilisation of 97 % as 97.0, exactly as before these models existed.
"""

from __future__ import annotations

from pydantic import Field

from tokenrace.model.base import _Model

Number = float | int  # a reading kept as the engine or the OS gave it (a count stays an integer)


# ---- timeseries.jsonl: one line per sample -----------------------------------------------------


class GpuSample(_Model):
    """One GPU at one sample (NVML)."""

    index: int | None = None  # NVML's device index (always written; None only in a hand-made line)
    name: str | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle: list[str] | None = None  # active slow-down reasons; [] none, None when NVML cannot tell


class SystemSample(_Model):
    """This machine and the client process at one sample (psutil)."""

    cpu_pct: float | None = None  # all cores: 100 = every core busy
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    net_rx_bytes_per_s: float | None = None
    net_tx_bytes_per_s: float | None = None
    net_loopback_bytes_per_s: float | None = None
    proc_cpu_pct: float | None = None  # one core = 100
    proc_rss_bytes: int | None = None


class ServerSample(_Model):
    """The server's /metrics at one sample, in the same fields for every engine."""

    engine: str | None = None
    running: Number | None = None
    waiting: Number | None = None
    kv_cache_usage: Number | None = None  # fraction 0-1 of the fullest cache
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    preemptions_total: Number | None = None  # cumulative since the server began
    ttft_mean_ms: float | None = None  # over the time since the previous scrape
    tpot_mean_ms: float | None = None
    scrape_ms: float | None = None


class TimeseriesLine(_Model):
    """One line of timeseries.jsonl; a sampler that is off or failed leaves its part None."""

    t_ms: float | None = None  # since the run's t0 (records.jsonl `start_ms` lines up with it)
    wall: str | None = None  # UTC, ISO 8601 with milliseconds
    gpu: list[GpuSample] | None = None
    system: SystemSample | None = None
    server: ServerSample | None = None


# ---- the resource summary ----------------------------------------------------------------------


class GpuFigures(_Model):
    """One GPU over the monitored span."""

    index: int | None = None
    name: str | None = None
    util_pct_mean: float | None = None
    util_pct_max: float | None = None
    peak_mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c_max: float | None = None
    power_w_mean: float | None = None
    power_w_max: float | None = None
    sm_clock_mhz_min: float | None = None
    sm_clock_mhz_max: float | None = None
    throttle_samples: dict[str, int] = Field(default_factory=dict)  # reason -> samples it was active in


class GpuResources(_Model):
    """Every GPU together: means over every sample of every GPU, the fullest GPU's peak memory."""

    count: int | None = None
    util_pct_mean: float | None = None
    util_pct_max: float | None = None
    peak_mem_used_bytes: int | None = None  # the fullest GPU's peak
    peak_mem_total_bytes: int | None = None  # that GPU's memory
    temp_c_max: float | None = None
    power_w_mean: float | None = None  # per GPU
    power_w_max: float | None = None
    sm_clock_mhz_min: float | None = None
    sm_clock_mhz_max: float | None = None
    throttle_samples: dict[str, int] = Field(default_factory=dict)
    per_gpu: list[GpuFigures] = Field(default_factory=list)


class SystemResources(_Model):
    cpu_pct_mean: float | None = None
    cpu_pct_max: float | None = None
    peak_mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    net_rx_bytes_per_s_mean: float | None = None
    net_rx_bytes_per_s_max: float | None = None
    net_tx_bytes_per_s_mean: float | None = None
    net_tx_bytes_per_s_max: float | None = None
    net_loopback_bytes_per_s_mean: float | None = None
    net_loopback_bytes_per_s_max: float | None = None
    proc_cpu_pct_mean: float | None = None
    proc_cpu_pct_max: float | None = None
    proc_peak_rss_bytes: int | None = None


class ServerResources(_Model):
    engine: str | None = None
    running_max: Number | None = None
    running_mean: float | None = None
    waiting_max: Number | None = None  # the longest queue seen
    waiting_mean: float | None = None
    kv_cache_usage_max: Number | None = None
    kv_cache_usage_mean: float | None = None
    generation_tokens_per_s_mean: float | None = None
    preemptions: int | None = None  # during the monitored span
    scrape_ms_max: float | None = None
    ttft_mean_ms: float | None = None  # the engine's own means over the span, from its histograms
    tpot_mean_ms: float | None = None


class SamplerStatus(_Model):
    """ok | unavailable (never worked here) | failed (disabled after errors) | off."""

    status: str | None = None
    reason: str | None = None
    errors: int = 0


class Resources(_Model):
    """summary.json `resources`: what the monitor saw over the run."""

    interval_s: float | None = None
    samples: int = 0
    started_at: str | None = None
    duration_s: float | None = None
    timeseries: str | None = None  # the samples' file name, beside this one
    local_server: bool | None = None  # False: the GPU figures describe the client's machine, not the server's
    gpu: GpuResources | None = None
    system: SystemResources | None = None
    server: ServerResources | None = None
    samplers: dict[str, SamplerStatus] = Field(default_factory=dict)
    errors: int = 0
    write_errors: int = 0
    notices: list[str] = Field(default_factory=list)


class ResourcesFile(Resources):
    """resources.json of `tokenrace monitor`: the summary, and how the command ran."""

    metrics_url: str | None = None
    interrupted: bool = False
    warnings: list[str] = Field(default_factory=list)  # the resource warnings' sentences


class MonitorSettings(_Model):
    """manifest.json `monitor`: how the run's monitor sampled."""

    interval_s: float | None = None
    metrics_url: str | None = None
