"""Resource warnings: each names the numbers that triggered it; none fire on a healthy run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.conftest import wait_until_async
from tests.fixtures.nvml.fake_pynvml import FakeNvml

from tokenrace.model.monitor import Resources
from tokenrace.model.summary import Summary
from tokenrace.monitor import MonitorSession
from tokenrace.monitor import resource_warnings as typed_warnings


def resource_warnings(resources: dict[str, Any], run: Summary | None) -> list[str]:
    """The warnings' sentences (each also carries its code and figures: see the test below)."""
    return [w.message for w in typed_warnings(Resources.model_validate(resources), run)]


def run_summary(p50: float = 1000.0, p95: float = 1200.0, tokens_per_s: float | None = 950.0) -> Summary:
    return Summary.model_validate(
        {"metrics": {"e2e_ms": {"p50": p50, "p95": p95}}, "throughput": {"output_tokens_per_s": tokens_per_s}}
    )


def resources(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "gpu": {"util_pct_mean": 60.0, "util_pct_max": 80.0, "temp_c_max": 60.0, "throttle_samples": {}},
        "system": {
            "cpu_pct_mean": 20.0,
            "proc_cpu_pct_mean": 15.0,
            "proc_cpu_pct_max": 30.0,
            "peak_mem_used_bytes": 8 * 2**30,
            "mem_total_bytes": 64 * 2**30,
        },
        "server": {"engine": "vllm", "waiting_max": 0, "running_max": 8, "kv_cache_usage_max": 0.4, "preemptions": 0},
        "samplers": {"gpu": {"status": "ok"}, "system": {"status": "ok"}, "server": {"status": "ok"}},
    }
    for key, value in parts.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and base.get(key) else value
    return base


def test_a_healthy_run_has_no_warnings() -> None:
    assert resource_warnings(resources(), run_summary()) == []


def test_busy_gpu_with_a_widening_tail_is_saturation() -> None:
    w = resource_warnings(resources(gpu={"util_pct_mean": 98.0}), run_summary(p50=1000.0, p95=2300.0))
    assert w == [
        "GPU at 98 % (mean) while p95 E2E was 2.3× p50: the backend is saturated; more concurrency only adds queueing"
    ]


def test_busy_gpu_and_a_server_queue_is_saturation_too() -> None:
    w = resource_warnings(resources(gpu={"util_pct_mean": 97.0}, server={"waiting_max": 7}), run_summary())
    assert len(w) == 1 and "the server queued up to 7 requests" in w[0] and "saturated" in w[0]


def test_a_queue_with_an_idle_gpu_points_at_the_servers_limit() -> None:
    w = resource_warnings(resources(server={"waiting_max": 3, "running_max": 2}), run_summary())
    assert w == [
        (
            "the server queued up to 3 requests while running at most 2 with the GPU at 60 %: its batch or slot limit "
            "caps concurrency; requests beyond it only wait (latency includes time in the server's queue)"
        )
    ]


def test_each_warning_has_a_code_and_the_figures_that_raised_it() -> None:
    (w,) = typed_warnings(
        Resources.model_validate(resources(server={"waiting_max": 3, "running_max": 2})), run_summary()
    )
    assert w.code == "resources.server_queue"
    assert w.figures == {"server_waiting_max": 3, "server_running_max": 2, "gpu_util_pct_mean": 60.0}


def test_the_client_at_full_cpu_bounds_the_numbers() -> None:
    w = resource_warnings(resources(system={"proc_cpu_pct_mean": 99.0, "proc_cpu_pct_max": 100.0}), run_summary())
    assert w == ["the client's CPU was at 99 % of a core (mean; max 100 %): the numbers may be bounded by the client"]


def test_idle_gpu_kv_full_preemptions_heat_and_memory() -> None:
    w = resource_warnings(
        resources(
            gpu={
                "util_pct_mean": 12.0,
                "util_pct_max": 40.0,
                "temp_c_max": 88.0,
                "throttle_samples": {"hw_thermal": 4, "sw_power_cap": 9},
            },
            server={"kv_cache_usage_max": 0.98, "preemptions": 5},
            system={"peak_mem_used_bytes": 63 * 2**30, "cpu_pct_mean": 95.0},
        ),
        run_summary(),
    )
    text = "\n".join(w)
    assert "GPU utilisation averaged 12 % (max 40 %): the GPU was not the bottleneck" in text
    assert "the KV cache was 98 % full at peak" in text
    assert "the server preempted 5 requests" in text
    assert "the GPU reached 88 °C with thermal slowdown in 4 GPU samples" in text
    assert "system memory peaked at 63.0 of 64.0 GiB" in text
    assert "this machine's CPU was at 95 %" in text


def test_gpu_figures_of_a_remote_servers_client_are_not_judged() -> None:
    r = resources(gpu={"util_pct_mean": 3.0, "util_pct_max": 5.0})
    r["local_server"] = False
    assert resource_warnings(r, run_summary()) == []


def test_a_sampler_that_stopped_is_mentioned_and_missing_figures_are_silent() -> None:
    r = resources(samplers={"gpu": {"status": "failed", "errors": 1, "reason": "NVMLError: GPU is lost"}})
    r["server"] = None
    assert resource_warnings(r, None) == [
        "monitor: the gpu sampler stopped after 1 errors (NVMLError: GPU is lost); its figures end there"
    ]
    assert resource_warnings({}, run_summary()) == []
    assert resource_warnings({"gpu": None, "system": None, "server": None}, Summary()) == []


def test_from_a_real_session_with_a_saturated_fake_gpu(tmp_path: Path) -> None:
    nvml = FakeNvml.from_fixture("h100x2_vllm_load.json")
    for d in nvml.devices:
        d["readings"] = d["readings"][4:]  # skip the idle start: full load from the first sample

    async def go() -> dict[str, Any]:
        m = MonitorSession(tmp_path, 0.05, nvml=nvml)
        await m.start()
        await wait_until_async(lambda: m.samples >= 5, what="5 samples")
        return (await m.stop()).model_dump()

    w = resource_warnings(asyncio.run(go()), run_summary(p50=800.0, p95=1900.0))
    assert w[0].startswith("GPU at 99 % (mean) while p95 E2E was 2.4× p50: the backend is saturated")
