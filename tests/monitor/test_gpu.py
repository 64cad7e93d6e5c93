"""The NVML sampler, through a fake NVML module with the same functions (and the real one, here)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_until_async
from tests.fixtures.nvml.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml

from tokenrace.monitor import GpuSampler, MonitorSession, SamplerUnavailable

H100_TOTAL = 85520809984  # 81559 MiB


def test_samples_two_h100s_in_nvml_units_converted() -> None:
    nvml = FakeNvml.from_fixture("h100x2_vllm_load.json")
    gpu = GpuSampler(nvml)
    gpu.open()
    idle = [g.model_dump() for g in gpu.sample()]
    for _ in range(3):
        gpu.sample()
    busy = [g.model_dump() for g in gpu.sample()]  # the fifth reading: full load at the power cap
    gpu.close()
    assert [g["index"] for g in idle] == [0, 1]
    assert idle[0] == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "util_pct": 0.0,
        "mem_used_bytes": 74021 * 2**20,
        "mem_total_bytes": H100_TOTAL,
        "temp_c": 34.0,
        "power_w": 118.3,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980.0,
        "throttle": [],  # idle (0x1) is not a slow-down worth reporting
    }
    assert busy[0]["util_pct"] == 99.0 and busy[0]["power_w"] == 693.8 and busy[0]["sm_clock_mhz"] == 1905.0
    assert busy[0]["throttle"] == ["sw_power_cap"]
    assert busy[1]["temp_c"] == 59.0
    assert nvml.calls["nvmlShutdown"] == 1


def test_thermal_slowdown_bits_are_named() -> None:
    gpu = GpuSampler(FakeNvml.from_fixture("h100_pcie_thermal.json"))
    gpu.open()
    samples = [gpu.sample()[0].model_dump() for _ in range(8)]
    assert samples[3]["throttle"] == ["sw_thermal"]
    assert samples[-1]["throttle"] == ["sw_thermal", "hw_thermal"]
    assert samples[-1]["sm_clock_mhz"] == 1290.0 and samples[-1]["temp_c"] == 90.0


def test_a_field_the_board_does_not_support_is_none_and_not_asked_again() -> None:
    nvml = FakeNvml.from_fixture("h100x2_vllm_load.json", unsupported={"nvmlDeviceGetPowerUsage"})
    gpu = GpuSampler(nvml)
    gpu.open()
    first = [g.model_dump() for g in gpu.sample()]
    for _ in range(4):
        gpu.sample()
    assert first[0]["power_w"] is None and first[0]["util_pct"] == 0.0
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 2  # once per GPU, then never again


def test_no_driver_is_reported_once_as_unavailable() -> None:
    gpu = GpuSampler(FakeNvml.from_fixture("h100x2_vllm_load.json", init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(SamplerUnavailable, match="no NVIDIA GPU / NVML unavailable.*NVML Shared Library Not Found"):
        gpu.open()


def test_zero_devices_is_unavailable() -> None:
    nvml = FakeNvml([])
    with pytest.raises(SamplerUnavailable, match="0 devices"):
        GpuSampler(nvml).open()
    assert nvml.calls["nvmlShutdown"] == 1


def test_real_nvml_on_this_machine() -> None:
    """The real pynvml: with no GPU it must say so; with one, give real numbers."""
    gpu = GpuSampler()
    try:
        gpu.open()
    except SamplerUnavailable as exc:
        assert "NVML" in str(exc) or "NVIDIA" in str(exc)
        return
    try:
        g = gpu.sample()[0].model_dump()
        assert g["mem_total_bytes"] > 2**30 and 0 <= (g["util_pct"] or 0) <= 100
    finally:
        gpu.close()


def test_session_without_gpu_says_so_once_and_keeps_sampling(tmp_path: Path) -> None:
    nvml = FakeNvml.from_fixture("h100x2_vllm_load.json", init_error=NVML_ERROR_LIBRARY_NOT_FOUND)

    async def go() -> dict[str, Any]:
        m = MonitorSession(tmp_path, 0.05, nvml=nvml)
        await m.start()
        await wait_until_async(lambda: m.samples >= 3, what="3 samples")
        return (await m.stop()).model_dump()

    r = asyncio.run(go())
    assert r["samplers"]["gpu"]["status"] == "unavailable"
    assert "no NVIDIA GPU / NVML unavailable" in r["samplers"]["gpu"]["reason"]
    assert r["errors"] == 0 and r["gpu"] is None and r["samples"] >= 3
    assert [n for n in r["notices"] if "gpu" in n] == [
        f"monitor: gpu sampler unavailable: {r['samplers']['gpu']['reason']}"
    ]
    assert nvml.calls["nvmlInit"] == 1  # not retried every tick


def test_a_lost_gpu_disables_the_sampler_not_the_monitor(tmp_path: Path) -> None:
    nvml = FakeNvml.from_fixture("h100x2_vllm_load.json", lost_after=("nvmlDeviceGetMemoryInfo", 4))

    async def go() -> dict[str, Any]:
        m = MonitorSession(tmp_path, 0.05, nvml=nvml)
        await m.start()
        await wait_until_async(lambda: m.samples >= 6, what="6 samples")
        return (await m.stop()).model_dump()

    r = asyncio.run(go())
    gpu = r["samplers"]["gpu"]
    assert gpu["status"] == "failed" and gpu["errors"] == 1 and "GPU is lost" in gpu["reason"]
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 5  # 2 samples × 2 GPUs, then the failing call: never retried
    assert r["samples"] >= 6 and r["system"] is not None  # the other samplers went on
    assert r["gpu"]["count"] == 2 and r["gpu"]["util_pct_max"] == 0.0  # the two samples taken before the loss
    lines = (tmp_path / "timeseries.jsonl").read_text().splitlines()
    assert '"gpu":null' in lines[-1]


def test_recorded_h100_at_its_power_cap() -> None:
    """Readings of a real H100 (tests/fixtures/nvml/h100_recorded.json): idle at 1980 MHz with no
    slow-down, then under bf16 matrix products the board sits at its 700 W limit and NVML names the
    software power cap while the SM clock drops to 1320-1440 MHz."""
    nvml = FakeNvml.from_fixture("h100_recorded.json")
    gpu = GpuSampler(nvml)
    gpu.open()
    samples = [gpu.sample()[0].model_dump() for _ in range(len(nvml.devices[0]["readings"]))]
    gpu.close()
    assert samples[0]["name"] == "NVIDIA H100 80GB HBM3" and samples[0]["power_limit_w"] == 700.0
    assert samples[0]["throttle"] == [] and samples[0]["sm_clock_mhz"] == 1980.0
    busy = [s for s in samples if s["util_pct"] >= 99]
    assert len(busy) >= 30
    assert all(s["throttle"] == ["sw_power_cap"] for s in busy)
    assert min(s["sm_clock_mhz"] for s in busy) == 1320.0 and max(s["sm_clock_mhz"] for s in busy) == 1440.0
    assert max(s["power_w"] for s in busy) == pytest.approx(709.537)
