"""Saturation, the knee, the prefill fit and the goodput search: pure functions over step figures.

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

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

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


@dataclass(frozen=True, slots=True)
class PrefillFit:
    """ttft_ms = intercept_ms + slope_ms_per_token * prompt_tokens, least squares."""

    points: int
    slope_ms_per_token: float | None
    intercept_ms: float | None
    r2: float | None
    prefill_tokens_per_s: float | None  # 1000 / slope; None unless the slope is positive

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "points": self.points,
            "slope_ms_per_token": _r(self.slope_ms_per_token, 6),
            "intercept_ms": _r(self.intercept_ms, 4),
            "r2": _r(self.r2, 4),
            "prefill_tokens_per_s": _r(self.prefill_tokens_per_s, 2),
        }


def _r(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def fit_prefill(tokens: Sequence[float | None], ttft_ms: Sequence[float | None]) -> PrefillFit:
    pairs = [(x, y) for x, y in zip(tokens, ttft_ms, strict=False) if x is not None and y is not None]
    xs = np.array([p[0] for p in pairs], dtype=float)
    ys = np.array([p[1] for p in pairs], dtype=float)
    if len(pairs) < 2 or np.ptp(xs) == 0:
        return PrefillFit(len(pairs), None, None, None, None)
    slope, intercept = (float(v) for v in np.polyfit(xs, ys, 1))
    resid = ys - (intercept + slope * xs)
    total = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else None
    rate = 1000.0 / slope if slope > 0 else None
    return PrefillFit(len(pairs), slope, intercept, r2, rate)


# --- the highest rate that meets the SLOs -----------------------------------------------------


@dataclass(slots=True)
class Search:
    best_rate: float | None = None
    probes: list[tuple[float, bool]] = field(default_factory=list)
    lower: float | None = None  # highest rate that passed
    upper: float | None = None  # lowest rate that failed
    reason: str = "converged"  # converged | max_probes | no_passing_rate | no_failing_rate


Probe = Callable[[float], Awaitable[bool]]


async def search_max_rate(
    probe: Probe, start: float, tolerance: float = 0.10, max_probes: int = 12, min_rate: float = 0.01
) -> Search:
    """Bracket the pass/fail boundary by doubling or halving from `start`, then bisect until
    upper/lower - 1 <= tolerance. Every probe is kept, in order."""
    s = Search()

    async def run(rate: float) -> bool:
        ok = await probe(rate)
        s.probes.append((rate, ok))
        if ok:
            s.lower = rate if s.lower is None else max(s.lower, rate)
        else:
            s.upper = rate if s.upper is None else min(s.upper, rate)
        return ok

    rate = start
    ok = await run(rate)
    while len(s.probes) < max_probes and (s.upper is None or s.lower is None):
        rate = rate * 2 if ok else rate / 2
        if rate < min_rate:
            break
        ok = await run(rate)
    while (
        s.lower is not None and s.upper is not None and s.upper / s.lower - 1 > tolerance and len(s.probes) < max_probes
    ):
        await run((s.lower + s.upper) / 2)
    s.best_rate = s.lower
    s.reason = _search_reason(s, tolerance)
    return s


def _search_reason(s: Search, tolerance: float) -> str:
    if s.lower is None:
        return "no_passing_rate"
    if s.upper is None:
        return "no_failing_rate"
    return "converged" if s.upper / s.lower - 1 <= tolerance else "max_probes"
