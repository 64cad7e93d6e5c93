"""Probes beside the load, and the open loop's over-saturation stop, against the fake server."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from tests.conftest import in_process

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.runner import Load
from tokenrace.load.saturation import Detector, SaturationRule, Tick
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings


def settings(url: str, out: Path, load: Load) -> BenchSettings:
    return BenchSettings(
        endpoint=ResolvedEndpoint(url + "/v1", None, None, "fake"),
        request=RequestOptions(max_tokens=8),
        load=load,
        output=out,
    )


@pytest.mark.slow
def test_probes_are_counted_apart_from_the_main_load(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 5, "output_tokens": 8}) as srv:
        load = Load(concurrency=2, duration_s=10.0, cold=False, probe_rate=2.0)
        result = asyncio.run(BenchSession(settings(srv.url, tmp_path / "r", load)).run())
    lines = [json.loads(x) for x in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    probes = [x for x in lines if x["phase"] == "probe"]
    measured = [x for x in lines if x["phase"] == "measure"]
    assert 18 <= len(probes) <= 21
    assert all(p["output_tokens"] == 1 and p["max_tokens"] == 1 for p in probes)
    s = result.summary.model_dump(mode="json")
    assert s["probes"]["requests"] == len(probes) and s["probes"]["rate"] == 2.0
    assert s["probes"]["ttft_ms"]["count"] == s["probes"]["succeeded"] >= 18
    assert s["requests"]["total"] == len(measured)  # the probes are not in the main statistics
    assert s["metrics"]["output_tokens"]["min"] == 8


@pytest.mark.slow
def test_an_over_saturated_open_loop_stops_early(tmp_path: Path) -> None:
    # 2 slots of ~100 ms: about 20 requests/s at most, offered 40/s for 30 s.
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 10, "output_tokens": 8, "slots": 2}) as srv:
        load = Load(rate=40.0, duration_s=30.0, cold=False, arrival="constant")
        t0 = time.monotonic()
        result = asyncio.run(BenchSession(settings(srv.url, tmp_path / "r", load)).run())
        took = time.monotonic() - t0
    stopped = result.summary.model_dump(mode="json")["stopped"]
    assert stopped is not None and stopped["reason"] == "over-saturated", result.summary
    assert took < 20 and stopped["after_s"] < 15
    assert stopped["end_rate"] < stopped["send_rate"] and stopped["in_flight_end"] > stopped["in_flight_start"]
    assert stopped["ttft_ms_end"] > stopped["ttft_ms_start"]
    assert "over-saturated" in stopped["message"] and not result.interrupted


@pytest.mark.slow
def test_a_server_that_keeps_up_is_never_stopped(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 10, "itl_ms": 2, "output_tokens": 8}) as srv:
        load = Load(rate=20.0, duration_s=7.0, cold=False)
        result = asyncio.run(BenchSession(settings(srv.url, tmp_path / "r", load)).run())
    assert result.summary.stopped is None and result.summary.requests.cancelled == 0


def test_the_detector_needs_all_three_signs() -> None:
    rule = SaturationRule(window_s=4, min_s=4, interval_s=1)
    growing = [(t, 10 + 5.0 * t) for t in range(10)]  # TTFT rising 5 ms a second
    d = Detector(rule)
    stops = [d.check(Tick(t, 20 * t, 12 * t, 8 * t), growing) for t in range(9)]
    assert stops[:4] == [None] * 4 and stops[-1] is not None
    steady = Detector(rule)  # ends keep up with sends: never
    assert all(steady.check(Tick(t, 20 * t, 20 * t, 3), growing) is None for t in range(9))
    flat = Detector(rule)  # TTFT flat: never
    assert all(flat.check(Tick(t, 20 * t, 12 * t, 8 * t), [(x, 50.0) for x in range(10)]) is None for t in range(9))


def test_a_bad_probe_rate_names_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    p = in_process(capsys, "bench", "--url", "http://127.0.0.1:9", "--probe-rate", "0", "--requests", "2")
    assert p.returncode == 2 and p.stderr.startswith("error: --probe-rate: must be a positive"), p.stderr
