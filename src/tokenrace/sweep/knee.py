"""Saturation, the knee and the prefill fit: pure functions over step figures.

Definitions (docs/sweep.md):

- gain of step i: throughput_i / throughput_(i-1) - 1 (None when either is undefined or the previous is 0).
- step i is *saturated* when its gain is below the threshold (default 10 %) while its p95 latency is
  higher than the previous step's.
- step i is *failing* when its error rate is above the limit.
- the sweep stops at the first failing step, or once `patience` consecutive steps are saturated.
- the *knee* is the step just before the first saturated step of that stopping run: the last load
  at which adding load still bought at least `threshold` more throughput. With no saturation it is
  the last step before the first failing step; with neither it is None (not reached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokenrace.model.run import PrefillFit

DEFAULT_GAIN_THRESHOLD = 0.10
DEFAULT_MAX_ERROR_RATE = 0.05


@dataclass(frozen=True, slots=True)
class Point:
    """What the saturation rule needs from one step."""

    load: float  # concurrency, or offered rate
    throughput: float | None  # output tokens/s
    latency_p95: float | None  # ms
    error_rate: float | None


@dataclass(slots=True)
class Analysis:
    gains: list[float | None]
    saturated: list[bool]
    failing: list[bool]
    stop_index: int | None  # the step at which the sweep stops (None: it ran to the end)
    stop_reason: str  # saturated | errors | completed
    knee_index: int | None
    knee_reason: str | None  # saturation | errors


def gain(prev: float | None, cur: float | None) -> float | None:
    if prev is None or cur is None or prev <= 0:
        return None
    return cur / prev - 1.0


def is_saturated(prev: Point, cur: Point, threshold: float) -> bool:
    g = gain(prev.throughput, cur.throughput)
    rising = prev.latency_p95 is not None and cur.latency_p95 is not None and cur.latency_p95 > prev.latency_p95
    return g is not None and g < threshold and rising


def is_failing(p: Point, max_error_rate: float) -> bool:
    # A step with no throughput at all (every request failed) fails whatever the limit.
    return (p.error_rate is not None and p.error_rate > max_error_rate) or p.throughput is None


def analyse(
    points: Sequence[Point],
    threshold: float = DEFAULT_GAIN_THRESHOLD,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    patience: int = 1,
) -> Analysis:
    """Apply the rules above to the steps run so far (in load order)."""
    gains: list[float | None] = [None]
    saturated = [False]
    for prev, cur in zip(points, points[1:], strict=False):
        gains.append(gain(prev.throughput, cur.throughput))
        saturated.append(is_saturated(prev, cur, threshold))
    failing = [is_failing(p, max_error_rate) for p in points]
    a = Analysis(gains[: len(points)], saturated[: len(points)], failing, None, "completed", None, None)
    run = 0
    for i in range(len(points)):
        if failing[i]:
            a.stop_index, a.stop_reason = i, "errors"
            if i > 0:
                a.knee_index, a.knee_reason = i - 1, "errors"
            return a
        run = run + 1 if saturated[i] else 0
        if run >= patience:
            a.stop_index, a.stop_reason = i, "saturated"
            a.knee_index, a.knee_reason = i - run, "saturation"
            return a
    return a


# --- prompt length: TTFT against input tokens -------------------------------------------------


def _r(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def fit_prefill(
    tokens: Sequence[float | None], ttft_ms: Sequence[float | None], x: str | None = None, y: str | None = None
) -> PrefillFit:
    """ttft_ms = intercept_ms + slope_ms_per_token * prompt_tokens, least squares; `x` and `y` name
    the figures fitted (kept with the fit in sweep.json)."""
    pairs = [(x, y) for x, y in zip(tokens, ttft_ms, strict=False) if x is not None and y is not None]
    xs = np.array([p[0] for p in pairs], dtype=float)
    ys = np.array([p[1] for p in pairs], dtype=float)
    if len(pairs) < 2 or np.ptp(xs) == 0:
        return PrefillFit(points=len(pairs), x=x, y=y)
    slope, intercept = (float(v) for v in np.polyfit(xs, ys, 1))
    resid = ys - (intercept + slope * xs)
    total = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else None
    rate = 1000.0 / slope if slope > 0 else None
    return PrefillFit(
        points=len(pairs),
        slope_ms_per_token=_r(slope, 6),
        intercept_ms=_r(intercept, 4),
        r2=_r(r2, 4),
        prefill_tokens_per_s=_r(rate, 2),
        x=x,
        y=y,
    )
