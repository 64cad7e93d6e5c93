"""summary.json's `drift`: a soak run split into windows, with fitted trends, error bursts and
findings in words (built by `figures.drift.drift`; the figures are defined in docs/metrics.md)."""

from __future__ import annotations

from pydantic import Field

from tokenrace.model.base import _Model
from tokenrace.model.stats import Percentiles


class DriftWindow(_Model):
    """One window: the requests that started in it, and the monitor's samples taken in it."""

    index: int
    start_s: float  # seconds since the run's t0
    end_s: float
    requests: int = 0
    succeeded: int = 0
    errors: int = 0
    error_rate: float | None = None
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    ttft_ms: Percentiles = Field(default_factory=Percentiles)  # p50, p95 over its succeeded requests
    e2e_ms: Percentiles = Field(default_factory=Percentiles)
    samples: int = 0  # timeseries samples in the window; the figures below are their mean (or max)
    gpu_mem_used_bytes: float | None = None  # all GPUs together, mean
    gpu_util_pct: float | None = None  # mean
    gpu_temp_c: float | None = None  # the hottest GPU, max
    sm_clock_mhz: float | None = None  # mean
    sys_mem_used_bytes: float | None = None  # mean
    proc_rss_bytes: float | None = None  # mean
    kv_cache_usage: float | None = None  # mean
    waiting: float | None = None  # max
    thermal_samples: int = 0  # samples in which a GPU slowed itself for heat


class Trend(_Model):
    """Least-squares slopes per minute; None when there were too few points to fit."""

    ttft_p50_ms_per_min: float | None = None
    ttft_p95_ms_per_min: float | None = None
    e2e_p50_ms_per_min: float | None = None
    e2e_p95_ms_per_min: float | None = None
    gpu_mem_used_bytes_per_min: float | None = None
    sys_mem_used_bytes_per_min: float | None = None
    proc_rss_bytes_per_min: float | None = None
    sm_clock_mhz_per_min: float | None = None
    gpu_temp_c_per_min: float | None = None


class TrendFit(_Model):
    """One fitted line: slope per minute, r, the fitted value at the first point, and the change over
    the fitted span (absolute, and as a % of the start value)."""

    slope: float
    r: float | None = None
    points: int
    start: float
    change: float
    change_pct: float | None = None


class ErrorBurst(_Model):
    """A window whose error rate is far above the run's."""

    index: int
    start_s: float
    end_s: float
    requests: int
    errors: int
    error_rate: float
    errors_by_kind: dict[str, int] = Field(default_factory=dict)


class Drift(_Model):
    """Per-window figures, trends (per minute), error bursts and plain-language findings."""

    window_s: float | None = None
    windows: list[DriftWindow] = Field(default_factory=list)
    requests: int = 0
    error_rate: float | None = None
    trend: Trend = Field(default_factory=Trend)
    trend_fit: dict[str, TrendFit] = Field(default_factory=dict)  # keyed like `trend`; only the lines fitted
    error_bursts: list[ErrorBurst] = Field(default_factory=list)
    findings: list[str] = Field(default_factory=list)
