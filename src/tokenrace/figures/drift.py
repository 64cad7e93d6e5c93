"""Soak runs: split a long run into windows and report drift (latency, memory, clocks, error bursts).

A leak or thermal throttling does not show in a run's p50; it shows as a slope. `drift()` puts each
measured request in the window its *start* falls in, takes p50/p95 TTFT and E2E and the errors of
each window, and averages the monitor's timeseries over the same windows. Trends are least-squares
lines, with slopes per minute:

- latency: fitted to the per-window p50/p95 (robust to single slow requests), using windows with at
  least MIN_WINDOW_REQUESTS succeeded requests; at least MIN_FIT_POINTS windows are needed;
- memory, SM clock, temperature: fitted to every timeseries sample inside the measured span.

Default window (`default_window_s`): 30 s, or a twentieth of the run when that is longer: a 5-minute
soak gets 10 windows of 30 s, an hour 20 windows of 3 minutes. `bench --duration` of 5 minutes or
more (SOAK_MIN_DURATION_S) is a soak.

Time base: seconds since the run's t0 (the records' `start_ms` / 1000, settled with the run's t0;
timeseries `t_ms` / 1000 when the monitor was given the same t0_ns).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tokenrace.model.drift import Drift, DriftWindow, ErrorBurst, Trend, TrendFit
from tokenrace.model.monitor import GpuSample, Number, TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.model.stats import Percentiles
from tokenrace.stats import describe

SOAK_MIN_DURATION_S = 300.0
MIN_WINDOW_S = 30.0
TARGET_WINDOWS = 20
MIN_WINDOW_REQUESTS = 5  # a window's percentiles need a few requests to mean anything
MIN_FIT_POINTS = 3
# A finding needs a steady trend (|r| at least this) that moved the figure by at least this much.
LATENCY_R, LATENCY_CHANGE_PCT = 0.7, 20.0
MEMORY_R = 0.8
MEMORY_GROWTH_BYTES = {
    "gpu_mem_used_bytes": 512 * 2**20,
    "sys_mem_used_bytes": 512 * 2**20,
    "proc_rss_bytes": 128 * 2**20,
}
CLOCK_R, CLOCK_DROP_PCT = 0.7, 5.0
BURST_MIN_ERRORS, BURST_FACTOR, BURST_MARGIN = 3, 3.0, 0.05
THERMAL = ("sw_thermal", "hw_thermal")


def default_window_s(duration_s: float) -> float:
    return max(MIN_WINDOW_S, duration_s / TARGET_WINDOWS)


def is_soak(duration_s: float | None) -> bool:
    return duration_s is not None and duration_s >= SOAK_MIN_DURATION_S


@dataclass(slots=True)
class _Req:
    start_s: float
    ttft_ms: float | None
    e2e_ms: float | None
    error_kind: str | None


@dataclass(slots=True)
class _Window:
    index: int
    start_s: float
    end_s: float
    reqs: list[_Req] = field(default_factory=list)
    samples: list[TimeseriesLine] = field(default_factory=list)

    @property
    def mid_min(self) -> float:
        return (self.start_s + self.end_s) / 120.0


def _from_records(records: Sequence[RequestRecord]) -> list[_Req]:
    """The measured requests (cancelled ones left out), live and settled or read from records.jsonl."""
    out = []
    for r in records:
        if r.phase != "measure" or r.error_kind == "cancelled" or r.start_ms is None:
            continue
        ok = r.error_kind is None
        out.append(_Req(r.start_ms / 1000.0, r.ttft_ms if ok else None, r.e2e_ms if ok else None, r.error_kind))
    return out


def drift(
    records: Sequence[RequestRecord], timeseries: Sequence[TimeseriesLine] | None = None, window_s: float | None = None
) -> Drift:
    """Per-window figures, fitted trends (per minute), error bursts and plain-language findings."""
    reqs = sorted(_from_records(records), key=lambda r: r.start_s)
    if not reqs:
        return Drift(window_s=window_s, findings=["no measured requests: nothing to judge drift by"])
    origin = reqs[0].start_s
    span = max(reqs[-1].start_s - origin, 1e-9)
    w = float(window_s) if window_s else default_window_s(span)
    windows = _windows(reqs, timeseries or (), origin, span, w)
    failed = sum(1 for r in reqs if r.error_kind is not None)
    run_rate = failed / len(reqs)
    rows = [_row(win) for win in windows]
    trend, fit = _trends(windows, rows)
    bursts = _bursts(rows, run_rate)
    return Drift(
        window_s=round(w, 3),
        windows=rows,
        requests=len(reqs),
        error_rate=round(run_rate, 6),
        trend=trend,
        trend_fit=fit,
        error_bursts=bursts,
        findings=_findings(windows, rows, fit, bursts, run_rate, w),
    )


def _windows(
    reqs: list[_Req], timeseries: Sequence[TimeseriesLine], origin: float, span: float, w: float
) -> list[_Window]:
    n = max(1, math.ceil(span / w))
    if span > 0 and span % w == 0:
        n += 1  # a request that starts exactly at the end gets its own window
    wins = [_Window(i, origin + i * w, origin + (i + 1) * w) for i in range(n)]
    for r in reqs:
        wins[min(int((r.start_s - origin) // w), n - 1)].reqs.append(r)
    for s in timeseries:
        if s.t_ms is None:
            continue
        k = (s.t_ms / 1000.0 - origin) // w
        if 0 <= k < n:
            wins[int(k)].samples.append(s)
    wins[-1].end_s = min(wins[-1].end_s, origin + span) if span > 1e-6 else wins[-1].end_s
    return wins


def _pcts(values: list[float]) -> Percentiles:
    d = describe(values)  # the one implementation every metric uses
    return Percentiles(p50=d.p50, p95=d.p95)


def _row(win: _Window) -> DriftWindow:
    ok = [r for r in win.reqs if r.error_kind is None]
    errors = [r.error_kind for r in win.reqs if r.error_kind is not None]
    samples = win.samples
    return DriftWindow(
        index=win.index,
        start_s=round(win.start_s, 3),
        end_s=round(win.end_s, 3),
        requests=len(win.reqs),
        succeeded=len(ok),
        errors=len(errors),
        error_rate=round(len(errors) / len(win.reqs), 6) if win.reqs else None,
        errors_by_kind=dict(Counter(errors)),
        ttft_ms=_pcts([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        e2e_ms=_pcts([r.e2e_ms for r in ok if r.e2e_ms is not None]),
        samples=len(samples),
        gpu_mem_used_bytes=_over_window(samples, "gpu_mem_used_bytes"),
        gpu_util_pct=_over_window(samples, "gpu_util_pct"),
        gpu_temp_c=_over_window(samples, "gpu_temp_c"),
        sm_clock_mhz=_over_window(samples, "sm_clock_mhz"),
        sys_mem_used_bytes=_over_window(samples, "sys_mem_used_bytes"),
        proc_rss_bytes=_over_window(samples, "proc_rss_bytes"),
        kv_cache_usage=_over_window(samples, "kv_cache_usage"),
        waiting=_over_window(samples, "waiting"),
        thermal_samples=sum(1 for s in samples if any(r in THERMAL for g in s.gpu or () for r in g.throttle or ())),
    )


def _gpu_values(s: TimeseriesLine, read: Callable[[GpuSample], Number | None]) -> list[float]:
    return [float(v) for g in s.gpu or () if (v := read(g)) is not None]


def _gpu_sum(s: TimeseriesLine, read: Callable[[GpuSample], Number | None]) -> float | None:
    vals = _gpu_values(s, read)
    return float(sum(vals)) if vals else None


def _gpu_mean(s: TimeseriesLine, read: Callable[[GpuSample], Number | None]) -> float | None:
    vals = _gpu_values(s, read)
    return float(sum(vals) / len(vals)) if vals else None


def _gpu_max(s: TimeseriesLine, read: Callable[[GpuSample], Number | None]) -> float | None:
    vals = _gpu_values(s, read)
    return float(max(vals)) if vals else None


def _float(v: Number | None) -> float | None:
    return None if v is None else float(v)


# Timeseries figures per window: (name, how to read one sample, mean or max over the window's samples).
Reader = Callable[[TimeseriesLine], "float | None"]
SERIES: tuple[tuple[str, Reader, str], ...] = (
    ("gpu_mem_used_bytes", lambda s: _gpu_sum(s, lambda g: g.mem_used_bytes), "mean"),  # all GPUs together
    ("gpu_util_pct", lambda s: _gpu_mean(s, lambda g: g.util_pct), "mean"),
    ("gpu_temp_c", lambda s: _gpu_max(s, lambda g: g.temp_c), "max"),
    ("sm_clock_mhz", lambda s: _gpu_mean(s, lambda g: g.sm_clock_mhz), "mean"),
    ("sys_mem_used_bytes", lambda s: _float(s.system.mem_used_bytes) if s.system else None, "mean"),
    ("proc_rss_bytes", lambda s: _float(s.system.proc_rss_bytes) if s.system else None, "mean"),
    ("kv_cache_usage", lambda s: _float(s.server.kv_cache_usage) if s.server else None, "mean"),
    ("waiting", lambda s: _float(s.server.waiting) if s.server else None, "max"),
)
READERS: dict[str, tuple[Reader, str]] = {name: (read, how) for name, read, how in SERIES}


def _over_window(samples: list[TimeseriesLine], name: str) -> float | None:
    """One series over a window's samples: their mean, or their max (None when no sample had it)."""
    read, how = READERS[name]
    vals = [v for v in (read(s) for s in samples) if v is not None]
    if not vals:
        return None
    return max(vals) if how == "max" else round(sum(vals) / len(vals), 3)


Row = Callable[[DriftWindow], "float | None"]
LATENCY_TRENDS: tuple[tuple[str, Row], ...] = (
    ("ttft_p50_ms_per_min", lambda r: r.ttft_ms.p50),
    ("ttft_p95_ms_per_min", lambda r: r.ttft_ms.p95),
    ("e2e_p50_ms_per_min", lambda r: r.e2e_ms.p50),
    ("e2e_p95_ms_per_min", lambda r: r.e2e_ms.p95),
)
SAMPLE_TRENDS = (
    ("gpu_mem_used_bytes_per_min", "gpu_mem_used_bytes"),
    ("sys_mem_used_bytes_per_min", "sys_mem_used_bytes"),
    ("proc_rss_bytes_per_min", "proc_rss_bytes"),
    ("sm_clock_mhz_per_min", "sm_clock_mhz"),
    ("gpu_temp_c_per_min", "gpu_temp_c"),
)


def _fit(x: list[float], y: list[float]) -> TrendFit | None:
    """Least-squares line: slope per minute, r, the fitted value at the first point and the change
    over the fitted span as a % of that start value."""
    if len(x) < MIN_FIT_POINTS or max(x) - min(x) <= 0:
        return None
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    slope, intercept = np.polyfit(xa, ya, 1)
    start = float(intercept + slope * xa.min())
    r = float(np.corrcoef(xa, ya)[0, 1]) if ya.std() > 0 else None
    change = float(slope * (xa.max() - xa.min()))
    return TrendFit(
        slope=round(float(slope), 4),
        r=None if r is None or math.isnan(r) else round(r, 4),
        points=len(x),
        start=round(start, 4),
        change=round(change, 4),
        change_pct=round(change / abs(start) * 100.0, 2) if abs(start) > 1e-9 else None,
    )


def _trends(windows: list[_Window], rows: list[DriftWindow]) -> tuple[Trend, dict[str, TrendFit]]:
    trend: dict[str, float | None] = {}
    fit: dict[str, TrendFit] = {}
    usable = [(w, r) for w, r in zip(windows, rows, strict=False) if r.succeeded >= MIN_WINDOW_REQUESTS]
    for key, value in LATENCY_TRENDS:
        pts = [(w.mid_min, v) for w, r in usable if (v := value(r)) is not None]
        f = _fit([p[0] for p in pts], [p[1] for p in pts])
        trend[key] = None if f is None else round(f.slope, 4)
        if f:
            fit[key] = f
    samples = [s for w in windows for s in w.samples]
    for key, name in SAMPLE_TRENDS:
        read = READERS[name][0]
        pts = [(s.t_ms / 60000.0, v) for s in samples if s.t_ms is not None and (v := read(s)) is not None]
        f = _fit([p[0] for p in pts], [p[1] for p in pts])
        trend[key] = None if f is None else round(f.slope, 4)
        if f:
            fit[key] = f
    return Trend(**trend), fit


def _bursts(rows: list[DriftWindow], run_rate: float) -> list[ErrorBurst]:
    """Windows whose error rate is far above the run's: at least BURST_MIN_ERRORS errors, at least
    BURST_FACTOR times the run's rate, and at least BURST_MARGIN above it."""
    if run_rate <= 0:
        return []
    out = []
    for r in rows:
        rate = r.error_rate
        if rate is None or r.errors < BURST_MIN_ERRORS:
            continue
        if rate >= BURST_FACTOR * run_rate and rate >= run_rate + BURST_MARGIN:
            out.append(
                ErrorBurst(
                    index=r.index,
                    start_s=r.start_s,
                    end_s=r.end_s,
                    requests=r.requests,
                    errors=r.errors,
                    error_rate=rate,
                    errors_by_kind=r.errors_by_kind,
                )
            )
    return out


# ---- findings ------------------------------------------------------------------------------------

LATENCY_NAMES = {"ttft": "TTFT", "e2e": "E2E"}
MEMORY_NAMES = {
    "gpu_mem_used_bytes_per_min": ("GPU memory", "gpu_mem_used_bytes", "a leak or a growing cache in the server"),
    "sys_mem_used_bytes_per_min": ("system memory", "sys_mem_used_bytes", "something on this machine keeps memory"),
    "proc_rss_bytes_per_min": ("the client's memory", "proc_rss_bytes", "the client holds more with every request"),
}


def _findings(
    windows: list[_Window],
    rows: list[DriftWindow],
    fit: dict[str, TrendFit],
    bursts: list[ErrorBurst],
    run_rate: float,
    w: float,
) -> list[str]:
    out = (
        _latency_findings(fit) + _memory_findings(fit) + _clock_findings(fit, rows) + _burst_findings(bursts, run_rate)
    )
    judged = sum(1 for r in rows if r.succeeded >= MIN_WINDOW_REQUESTS)
    if not out:
        if judged < MIN_FIT_POINTS:
            out.append(
                f"too few windows to judge drift: {judged} of {len(rows)} windows of {w:g} s had "
                f"{MIN_WINDOW_REQUESTS}+ succeeded requests (need {MIN_FIT_POINTS})"
            )
        else:
            what = (
                "latency, memory and errors"
                if any(w_.samples for w_ in windows)
                else "latency and errors (no timeseries)"
            )
            out.append(f"no drift: {what} held steady over {len(rows)} windows of {w:g} s")
    return out


def _latency_findings(fit: dict[str, TrendFit]) -> list[str]:
    """One line per metric (TTFT, E2E): its p50 trend when that qualifies, else its p95."""
    out = []
    for metric, label in LATENCY_NAMES.items():
        for sign in (1, -1):
            hits: list[tuple[str, TrendFit, float]] = []
            for p in ("p50", "p95"):
                f = fit.get(f"{metric}_{p}_ms_per_min")
                change = _steady_change(f, sign) if f is not None else None
                if f is not None and change is not None:
                    hits.append((p, f, change))
            if not hits:
                continue
            p, f, change = hits[0]
            also = f"; p95 {hits[1][2]:+.0f} %" if len(hits) > 1 else ""
            verb, why = (
                ("rose", "latency drifts up; see the memory and clock trends")
                if sign > 0
                else ("fell", "the server was still warming up; a longer warm-up gives steadier numbers")
            )
            out.append(
                f"{label} {p} {verb} {abs(change):.0f} % over the run ({f.slope:+.1f} ms per minute, "
                f"r {f.r:.2f}{also}): {why}"
            )
    return out


def _steady_change(f: TrendFit, sign: int) -> float | None:
    """The % change of a trend in direction `sign` that is both steady (|r|) and large, else None."""
    r, change = f.r, f.change_pct
    if r is None or change is None:
        return None
    return change if sign * change >= LATENCY_CHANGE_PCT and sign * r >= LATENCY_R else None


def _memory_findings(fit: dict[str, TrendFit]) -> list[str]:
    out = []
    for key, (label, series, why) in MEMORY_NAMES.items():
        f = fit.get(key)
        if not f or f.r is None:
            continue
        if f.change >= MEMORY_GROWTH_BYTES[series] and f.r >= MEMORY_R:
            out.append(
                f"{label} grew {f.change / 2**20:,.0f} MiB over the run ({f.slope / 2**20:+,.1f} MiB per minute, "
                f"r {f.r:.2f}): {why}"
            )
    return out


def _clock_findings(fit: dict[str, TrendFit], rows: list[DriftWindow]) -> list[str]:
    f = fit.get("sm_clock_mhz_per_min")
    if not f or f.r is None or f.change_pct is None:
        return []
    if f.change_pct > -CLOCK_DROP_PCT or f.r > -CLOCK_R:
        return []
    temps = [r.gpu_temp_c for r in rows if r.gpu_temp_c is not None]
    thermal = sum(r.thermal_samples for r in rows)
    hot = f" while the GPU reached {max(temps):.0f} °C" if temps else ""
    cause = (
        f"thermal throttling (thermal slowdown in {thermal} samples)"
        if thermal
        else "the GPU slowed itself (power or thermal limits)"
    )
    return [f"the SM clock fell {-f.change_pct:.0f} % over the run ({f.slope:+.0f} MHz per minute){hot}: {cause}"]


def _burst_findings(bursts: list[ErrorBurst], run_rate: float) -> list[str]:
    out = []
    for b in bursts:
        kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(b.errors_by_kind.items(), key=lambda kv: -kv[1]))
        out.append(
            f"error burst at {b.start_s:.0f}–{b.end_s:.0f} s: {b.errors} of {b.requests} requests failed "
            f"({b.error_rate * 100:.0f} % against {run_rate * 100:.1f} % over the run; {kinds})"
        )
    return out
