"""What a bench run gains: resources, warnings, soak drift and the engine's clock from /metrics."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_until_async
from tests.monitor.test_server_metrics import FIXTURES, bump

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.load.runner import Load
from tokenrace.load.windows import Windows
from tokenrace.model.monitor import MonitorSettings, Resources, TimeseriesLine
from tokenrace.model.records import RequestRecord
from tokenrace.runs.instruments import discover_metrics_url, monitor_for_bench
from tokenrace.runs.reader import load
from tokenrace.runs.session import BenchSession
from tokenrace.runs.settings import BenchSettings
from tokenrace.runs.summary import EngineScrapes, RunContext, build_summary

MS = 1_000_000


def test_metrics_url_discovery() -> None:
    assert discover_metrics_url("http://10.0.0.5:8000/v1", None) == "http://10.0.0.5:8000/metrics"
    assert discover_metrics_url("http://localhost:30000/v1", "sglang") == "http://localhost:30000/metrics"
    assert discover_metrics_url("https://api.groq.com/openai/v1", "groq") is None
    assert discover_metrics_url("https://api.openai.com/v1", None) is None


def fake_records(t0: int, n: int, every_ms: float) -> list[RequestRecord]:
    out = []
    for i in range(n):
        start = t0 + int(i * every_ms * MS)
        chunks = [start + (100 + 20 * k) * MS for k in range(10)]
        out.append(
            RequestRecord(
                seq=i,
                start_ns=start,
                first_token_ns=chunks[0],
                end_ns=chunks[-1] + MS,
                chunk_ns=chunks,
                output_tokens=10,
                output_tokens_source="usage",
            )
        )
        out[-1].settle(t0)  # as the run store does
    return out


def test_a_monitored_run_gains_resources_warnings_and_the_engines_clock(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    text = (FIXTURES / "vllm.txt").read_text()
    path.write_text(text)
    with FakeServerThread({"metrics_text_path": str(path)}) as srv:

        async def go() -> tuple[Resources, Any, int]:
            t0 = time.perf_counter_ns()
            m = monitor_for_bench(tmp_path / "run", srv.base_url, None, t0, 0.1)
            await m.start()
            await wait_until_async(lambda: m.samples >= 2, what="2 scrapes")
            t = bump(text, "vllm:time_to_first_token_seconds_sum", 0.9)
            t = bump(t, "vllm:time_to_first_token_seconds_count", 10)
            t = bump(t, "vllm:time_per_output_token_seconds_sum", 0.18)
            path.write_text(bump(t, "vllm:time_per_output_token_seconds_count", 10))
            before = m.samples  # the next sample may have begun before the write: the one after it did not
            await wait_until_async(lambda: m.samples >= before + 2, what="2 scrapes after the change")
            return await m.stop(), m, t0

        resources, monitor, t0 = asyncio.run(go())
    records = fake_records(t0, 10, 30.0)
    engine, first, last = monitor.server_metrics_texts()
    assert engine is not None and first and last
    ctx = RunContext(Windows(), resources=resources, t0_ns=t0, scrapes=EngineScrapes(engine, first, last))
    summary = build_summary(records, ctx).model_dump(mode="json")
    assert summary["resources"]["server"]["engine"] == "vllm"
    assert summary["resources"]["local_server"] is True
    resource = [w for w in summary["warnings"] if w["code"].startswith("resources.")]
    assert any("the server queued up to 3 requests" in w["message"] for w in resource)
    svc = summary["server_vs_client"]
    assert svc["source"].startswith("vllm /metrics")
    assert svc["ttft_ms"]["server_mean"] == pytest.approx(90.0) and svc["ttft_ms"]["client_mean"] == pytest.approx(
        100.0
    )
    assert svc["tpot_ms"]["server_mean"] == pytest.approx(18.0)
    assert summary["drift"] is None  # not a soak


def test_a_soak_run_gains_drift_even_without_the_monitor() -> None:
    t0 = 10**12
    records = fake_records(t0, 700, 500.0)  # 350 s of requests
    summary = build_summary(records, RunContext(Windows(), t0_ns=t0, duration_s=350.0)).model_dump(mode="json")
    assert summary["resources"] is None
    d = summary["drift"]
    assert d["window_s"] == 30.0 and len(d["windows"]) == 12 and d["requests"] == 700
    assert d["findings"] == ["no drift: latency and errors (no timeseries) held steady over 12 windows of 30 s"]


def test_a_monitored_bench_saves_its_resources_and_monitor_in_the_documented_shape(tmp_path: Path) -> None:
    """bench --monitor end to end: summary.json `resources`, manifest.json `monitor` and timeseries.jsonl
    hold exactly their models' keys, and read back as those models."""
    with FakeServerThread(
        {"ttft_ms": 40, "itl_ms": 2, "output_tokens": 8, "metrics_text_path": str(FIXTURES / "vllm.txt")}
    ) as srv:
        settings = BenchSettings(
            endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
            request=RequestOptions(max_tokens=8),
            load=Load(requests=8),
            output=tmp_path / "run",
            monitor=True,
            monitor_interval_s=0.05,
        )
        run = asyncio.run(BenchSession(settings, argv=["tokenrace", "bench", "test"]).run())
    saved = json.loads((run.directory / "summary.json").read_text())["resources"]
    assert list(saved) == list(Resources.model_fields)
    assert saved["samples"] >= 1 and saved["timeseries"] == "timeseries.jsonl" and saved["local_server"] is True
    assert saved["server"]["engine"] == "vllm" and saved["samplers"]["system"]["status"] == "ok"
    assert Resources.model_validate(saved).model_dump(mode="json") == saved  # nothing but the model's keys
    manifest = json.loads((run.directory / "manifest.json").read_text())
    assert manifest["monitor"] == {"interval_s": 0.05, "metrics_url": f"{srv.url}/metrics"}
    loaded = load(run.directory)
    assert isinstance(loaded.summary.resources, Resources) and loaded.summary.resources.samples == saved["samples"]
    assert isinstance(loaded.manifest.monitor, MonitorSettings) and loaded.manifest.monitor.interval_s == 0.05
    lines = (run.directory / "timeseries.jsonl").read_text().splitlines()
    assert len(loaded.timeseries()) == len(lines) == saved["samples"]
    assert list(json.loads(lines[0])) == ["t_ms", "wall", "gpu", "system", "server"]
    assert isinstance(loaded.timeseries()[0], TimeseriesLine)
