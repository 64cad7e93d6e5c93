"""One metric's distribution, as `tokenrace.stats.describe` computes it."""

from __future__ import annotations

from tokenrace.model.base import _Model


class Stats(_Model):
    """One metric's distribution over the measured requests (see docs/metrics.md); None when undefined."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


class Spread(_Model):
    """A distribution with the percentiles the public references report (Artificial Analysis: P5, P25,
    P50, P75, P95; LLMPerf: P25 to P99), as `tokenrace.stats.spread` computes it; None when undefined."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p5: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
