"""Soak drift: windows, fitted trends with units, error bursts and what they mean in words."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import wait_until_async
from tests.fixtures.nvml.fake_pynvml import FakeNvml

from tokenrace.figures.drift import default_window_s, drift, is_soak
from tokenrace.model.monitor import TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.monitor import MonitorSession, load_timeseries

MS = 1_000_000


def records(
    n: int = 600,
    every_ms: float = 500.0,
    e2e: Callable[[float], float] = lambda t_s: 1000.0,
    errors: Callable[[int, float], str | None] = lambda i, t_s: None,
) -> list[RequestRecord]:
    rnd = random.Random(7)
    out = []
    for i in range(n):
        t_s = i * every_ms / 1000.0
        err = errors(i, t_s)
        e2e_ms = e2e(t_s) + rnd.random() * 20.0
        out.append(
            RequestRecord(
                seq=i,
                phase="measure",
                start_ms=t_s * 1000.0,
                error_kind=err,
                ttft_ms=None if err else e2e_ms / 10.0,
                e2e_ms=None if err else e2e_ms,
            )
        )
    return out


def test_default_window_and_what_counts_as_a_soak() -> None:
    assert default_window_s(300) == 30.0 and default_window_s(3600) == 180.0 and default_window_s(60) == 30.0
    assert is_soak(300) and not is_soak(299) and not is_soak(None)


def test_a_steady_run_has_no_drift() -> None:
    d = drift(records(), None)
    assert d.window_s == 30.0 and len(d.windows) == 10 and d.requests == 600
    w = d.windows[0]
    assert w.requests == 60 and w.start_s == 0.0 and w.end_s == 30.0
    assert w.e2e_ms.p50 == pytest.approx(1010.0, abs=5) and w.ttft_ms.p95 is not None
    slope = d.trend.e2e_p50_ms_per_min
    assert slope is not None and abs(slope) < 5.0
    assert d.trend.gpu_mem_used_bytes_per_min is None  # no timeseries: undefined, not 0
    assert d.error_bursts == []
    assert d.findings == ["no drift: latency and errors (no timeseries) held steady over 10 windows of 30 s"]


def test_latency_rising_two_ms_per_second_is_120_ms_per_minute() -> None:
    d = drift(records(e2e=lambda t: 1000.0 + 2.0 * t), None)
    assert d.trend.e2e_p50_ms_per_min == pytest.approx(120.0, rel=0.05)
    assert d.trend.ttft_p50_ms_per_min == pytest.approx(12.0, rel=0.05)
    f = d.trend_fit["e2e_p50_ms_per_min"]
    assert f.r > 0.99 and f.points == 10 and f.change_pct == pytest.approx(52, abs=3)
    assert d.findings[0].startswith("TTFT p50 rose")
    assert any(x.startswith("E2E p50 rose 5") and "ms per minute" in x for x in d.findings)


def test_latency_falling_is_a_warm_up_finding() -> None:
    d = drift(records(e2e=lambda t: 2000.0 - 4.0 * t), None)
    assert any("fell" in x and "warming up" in x for x in d.findings)


def test_an_error_burst_is_found_and_named() -> None:
    # Half the requests sent between 150 s and 180 s fail; one stray error elsewhere.
    def errs(i: int, t: float) -> str | None:
        if 150 <= t < 180 and i % 2 == 0:
            return "connection_reset"
        return "timeout_total" if i == 10 else None

    d = drift(records(errors=errs), None)
    assert [b.index for b in d.error_bursts] == [5]
    b = d.error_bursts[0]
    assert b.errors == 30 and b.requests == 60 and b.errors_by_kind == {"connection_reset": 30}
    assert any(x.startswith("error burst at 150–180 s: 30 of 60 requests failed") for x in d.findings)
    assert d.windows[0].errors == 1  # a single error is not a burst


def test_even_errors_are_not_bursts() -> None:
    d = drift(records(errors=lambda i, t: "http_500" if i % 10 == 0 else None), None)
    assert d.error_rate == 0.1 and d.error_bursts == []


def test_memory_trend_per_minute_from_the_timeseries() -> None:
    ts = [
        TimeseriesLine.model_validate(
            {
                "t_ms": k * 1000.0,
                "gpu": [{"mem_used_bytes": 70e9 + k * 5e6}],
                "system": {"mem_used_bytes": 10e9, "proc_rss_bytes": 100e6 + k * 1e6},
            }
        )
        for k in range(300)
    ]
    d = drift(records(), ts)
    assert d.trend.gpu_mem_used_bytes_per_min == pytest.approx(300e6)  # 5 MB/s
    assert d.trend.proc_rss_bytes_per_min == pytest.approx(60e6)
    assert d.trend.sys_mem_used_bytes_per_min == pytest.approx(0.0, abs=1e-3)
    assert d.windows[0].samples == 30 and d.windows[0].gpu_mem_used_bytes == pytest.approx(70e9 + 14.5 * 5e6)
    text = "\n".join(d.findings)
    assert "GPU memory grew 1,426 MiB over the run (+286.1 MiB per minute" in text
    assert "the client's memory grew" in text and "system memory" not in text


def test_record_objects_and_the_monitors_own_timeseries(tmp_path: Path) -> None:
    """Thermal throttling end to end: a real MonitorSession over the overheating fixture, with the
    run's t0 shared, and RequestRecord objects whose latency grows as the clock falls."""
    t0 = 10**15

    async def sample() -> list[TimeseriesLine]:
        m = MonitorSession(tmp_path, 0.05, nvml=FakeNvml.from_fixture("h100_pcie_thermal.json"), t0_ns=None)
        await m.start()
        await wait_until_async(lambda: m.samples >= 8, what="8 samples")
        await m.stop()
        return load_timeseries(tmp_path)

    ts = asyncio.run(sample())
    # Spread the samples over a 10-minute run: one every 75 s, as a 1 Hz monitor would show a trend.
    spaced = [s.model_copy(update={"t_ms": i * 75_000.0}) for i, s in enumerate(ts[:8])]
    recs = []
    for i in range(400):
        start = t0 + int(i * 1.5e9)
        r = RequestRecord(seq=i, start_ns=start, first_token_ns=start + 100 * MS, end_ns=start + int((900 + i) * MS))
        recs.append(r)
    recs.append(RequestRecord(seq=999, phase="warmup", start_ns=t0 - 10**9, end_ns=t0))  # not measured
    for r in recs:
        r.settle(t0)  # as the run store does, with the run's t0 the monitor shares
    d = drift(recs, spaced)
    assert d.requests == 400 and d.window_s == 30.0 and len(d.windows) == 20
    assert d.trend.sm_clock_mhz_per_min < -40
    assert d.trend.gpu_temp_c_per_min > 1.0
    text = "\n".join(d.findings)
    assert "the SM clock fell" in text and "thermal throttling (thermal slowdown in" in text and "90 °C" in text
    assert "E2E p50 rose" in text


def test_nothing_measured_and_too_few_windows() -> None:
    assert drift([], None).findings == ["no measured requests: nothing to judge drift by"]
    d = drift(records(n=20), None)
    assert d.trend.e2e_p50_ms_per_min is None
    assert d.findings[0].startswith("too few windows to judge drift")


def test_cancelled_and_warmup_requests_are_left_out() -> None:
    recs = records(n=100)
    recs[0].phase = "warmup"
    recs[1].error_kind = "cancelled"
    assert drift(recs, None).requests == 98
