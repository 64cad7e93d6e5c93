"""One metric's distribution, as `tokenrace.stats.describe` computes it, and the few percentiles a
smaller view of one keeps."""

from __future__ import annotations

from typing import cast

from pydantic import SerializerFunctionWrapHandler, model_serializer
from typing_extensions import TypedDict

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


class ShownPercentiles(TypedDict, total=False):
    """A `Percentiles` as written: the percentiles its view set."""

    p50: float | None
    p95: float | None
    p99: float | None


class Percentiles(_Model):
    """The percentiles a view shows of one figure (ms): a soak window's latency (p50, p95), the
    client calibration's biases (p50, p99), the gateway's shadow traffic (p50, p95). Each view sets
    those it shows, None when undefined; only the ones set are written, so each file keeps its shape."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None

    @model_serializer(mode="wrap")
    def _shown(self, handler: SerializerFunctionWrapHandler) -> ShownPercentiles:
        return cast(ShownPercentiles, {k: v for k, v in handler(self).items() if k in self.model_fields_set})


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
