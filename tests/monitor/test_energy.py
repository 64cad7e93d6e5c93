"""GPU energy over a run: a DCGM exporter page (real and fake), NVML through a fake `pynvml` at its
API boundary, and the run going on whatever the energy source does."""

from __future__ import annotations

import asyncio
import json
import socket
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.errors import InvalidInput
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.figures.efficiency import EfficiencySpec
from tokenrace.load.runner import Load
from tokenrace.model.summary import Summary
from tokenrace.monitor.energy import (
    EnergyMeter,
    EnergyUnavailable,
    EnergyWindow,
    GpuReading,
    NvmlEnergy,
    _gpu_window,
    parse_dcgm,
    sharing_warnings,
)
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession, read_inputs
from tokenrace.runs.settings import BenchSettings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
POWERS = [300.0, 450.0]


def js(summary: Summary) -> dict[str, Any]:
    """The summary as summary.json holds it."""
    return summary.model_dump(mode="json")


def bench(srv: FakeServerThread, out: Path, dcgm_url: str | None, requests: int = 24) -> Run:
    settings = BenchSettings(
        endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
        request=RequestOptions(max_tokens=16),
        load=Load(requests=requests, concurrency=2, cold=False),
        output=out,
        dcgm_url=dcgm_url,
    )
    return asyncio.run(BenchSession(settings, argv=["tokenrace", "bench"]).run())


def test_the_recorded_dcgm_exporter_page_reads_energy_and_power_per_gpu() -> None:
    """NVIDIA's own dcgm-exporter output (an A100 with a MIG instance)."""
    gpus = parse_dcgm((FIXTURES / "dcgm" / "dcgm_exporter_a100_mig.txt").read_text())
    assert [(g.gpu, g.energy_mj, g.power_w) for g in gpus] == [("0", 319159391.0, 409.692)]


def test_a_page_without_energy_or_power_is_refused_with_its_url() -> None:
    text = (FIXTURES / "metrics" / "vllm.txt").read_text()
    with pytest.raises(EnergyUnavailable, match="http://x/metrics has neither DCGM_FI_DEV_TOTAL_ENERGY"):
        parse_dcgm(text, "http://x/metrics")


def test_energy_is_power_times_window_from_the_dcgm_counter(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 5, "itl_ms": 3, "output_tokens": 16, "dcgm_power_w": POWERS}) as srv:
        r = bench(srv, tmp_path / "run", f"{srv.url}/dcgm/metrics")
    e = js(r.summary)["energy"]
    assert e["method"] == "counter" and e["source"].endswith("/dcgm/metrics")
    assert e["window_s"] > 0.2
    assert e["joules"] == pytest.approx(sum(POWERS) * e["window_s"], rel=0.02)
    assert [g["joules"] for g in e["gpus"]] == pytest.approx([p * e["window_s"] for p in POWERS], rel=0.02)
    assert e["output_tokens"] == 24 * 16
    assert e["joules_per_output_token"] == pytest.approx(e["joules"] / (24 * 16))
    assert e["output_tokens_per_joule"] == pytest.approx(24 * 16 / e["joules"])
    assert e["mean_power_w"] == pytest.approx(sum(POWERS), rel=0.02)
    # client.bound may be true here: the fake server shares this process's CPU.
    assert [w.code for w in r.summary.warnings if w.code not in ("client.bound", "stats.tail_unbounded")] == []


def test_without_the_counter_sampled_power_is_integrated_and_said_so(tmp_path: Path) -> None:
    config = {"ttft_ms": 5, "itl_ms": 3, "output_tokens": 16, "dcgm_power_w": [250.0], "dcgm_energy": False}
    with FakeServerThread(config) as srv:
        r = bench(srv, tmp_path / "run", f"{srv.url}/dcgm/metrics")
    e = js(r.summary)["energy"]
    assert e["method"] == "power_samples" and e["gpus"][0]["samples"] >= 2
    assert e["joules"] == pytest.approx(250.0 * e["window_s"], rel=0.02)


def test_a_counter_going_backwards_nulls_that_gpu_and_warns(tmp_path: Path) -> None:
    config = {"ttft_ms": 1, "itl_ms": 1, "output_tokens": 8, "dcgm_power_w": POWERS, "dcgm_restart_after": 1}
    with FakeServerThread(config) as srv:
        r = bench(srv, tmp_path / "run", f"{srv.url}/dcgm/metrics", requests=4)
    e = js(r.summary)["energy"]
    assert r.summary.requests.succeeded == 4
    assert e["joules"] is None and "went backwards" in e["reason"]
    assert all(g["joules"] is None and "restarted" in g["reason"] for g in e["gpus"])
    assert any("went backwards" in w.message and "/dcgm/metrics" in w.message for w in r.summary.warnings)
    assert "energy.gpu_missing" in [w.code for w in r.summary.warnings]


def test_an_unreachable_dcgm_url_warns_naming_it_and_the_run_goes_on(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/metrics"
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 1, "output_tokens": 8}) as srv:
        r = bench(srv, tmp_path / "run", url, requests=4)
    assert r.summary.requests.succeeded == 4
    e = js(r.summary)["energy"]
    assert e["joules"] is None and e["output_tokens_per_joule"] is None and url in e["reason"]
    assert any(w.code == "energy.unavailable" and url in w.message for w in r.summary.warnings)


def test_a_dcgm_url_without_the_energy_field_warns(tmp_path: Path) -> None:
    config = {
        "ttft_ms": 1,
        "itl_ms": 1,
        "output_tokens": 8,
        "metrics_text_path": str(FIXTURES / "metrics" / "vllm.txt"),
    }
    with FakeServerThread(config) as srv:
        url = f"{srv.url}/metrics"
        r = bench(srv, tmp_path / "run", url, requests=4)
    assert js(r.summary)["energy"]["joules"] is None
    assert any(url in w.message and "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in w.message for w in r.summary.warnings)


def test_a_malformed_dcgm_url_is_bad_input_before_the_network() -> None:
    endpoint = ResolvedEndpoint("http://127.0.0.1:9/v1", None, None, "fake")
    settings = BenchSettings(endpoint=endpoint, load=Load(requests=4), dcgm_url="gpu:9400")
    with pytest.raises(InvalidInput) as err:
        read_inputs(settings)
    assert err.value.param == "dcgm_url"


# --- NVML, through a fake pynvml with the functions the meter calls --------------------------------


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """Two GPUs: one with the total-energy counter (mJ), one without it (NOT_SUPPORTED) and its power in mW."""

    def __init__(self, energy_mj: list[list[int]], power_mw: list[int]) -> None:
        self.energy_mj = energy_mj  # per GPU, the successive counter readings (None: unsupported)
        self.power_mw = power_mw
        self.reads = [0, 0]
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if not self.energy_mj[h]:
            raise NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
        value = self.energy_mj[h][min(self.reads[h], len(self.energy_mj[h]) - 1)]
        self.reads[h] += 1
        return value

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self.power_mw[h]


class SharedNvml(FakeNvml):
    """As FakeNvml, with the processes NVML lists on each GPU (nvmlDeviceGetComputeRunningProcesses)."""

    def __init__(self, energy_mj: list[list[int]], power_mw: list[int], pids: list[list[int]]) -> None:
        super().__init__(energy_mj, power_mw)
        self.pids = pids

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in self.pids[h]]


def measure(nvml: Any, seconds: float) -> EnergyWindow:
    async def go() -> EnergyWindow:
        meter = EnergyMeter(NvmlEnergy(nvml), interval_s=0.02)
        await meter.start()
        await asyncio.sleep(seconds)
        return await meter.stop()

    return asyncio.run(go())


def test_nvml_counter_and_power_integration_per_gpu() -> None:
    # GPU 0's counter: 1 000 000 mJ at the start, 1 350 000 at the end (350 J); GPU 1 draws 200 W, no counter.
    nvml = FakeNvml([[1_000_000, 1_350_000], []], [0, 200_000])
    window = measure(nvml, 0.3)
    first, second = window.gpus
    assert (first.method, first.joules) == ("counter", 350.0)
    assert second.method == "power_samples" and second.samples is not None and second.samples >= 3
    assert second.joules == pytest.approx(200.0 * window.window_s, rel=0.05)
    assert second.mean_power_w == pytest.approx(200.0)
    assert nvml.shut and window.warnings == []


def test_an_nvml_counter_going_backwards_nulls_that_gpu() -> None:
    window = measure(FakeNvml([[5_000_000, 1_000], [7, 8]], [0, 0]), 0.01)
    assert window.gpus[0].joules is None and "went backwards" in (window.gpus[0].reason or "")
    assert window.gpus[1].joules == pytest.approx(0.001)
    assert len(window.warnings) == 1 and "GPU 0 (nvml)" in window.warnings[0].message
    assert window.warnings[0].figures == {"gpu": "0", "source": "nvml", "cause": "counter_backwards"}


def test_no_nvml_is_a_reason_not_a_crash() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED

    window = measure(NoDriver([[1], [1]], [0, 0]), 0.0)
    assert window.gpus == [] and "NVML unavailable" in (window.reason or "")


def test_a_recorded_nvml_power_reading_integrates_to_power_times_window() -> None:
    """nvidia-smi's own power reading of an idle RTX 2080 Ti, played through NVML's power call."""
    readings = ET.fromstring((FIXTURES / "nvml" / "nvidia_smi_q_rtx2080ti_power.xml").read_text())
    watts = float((readings.findtext("instant_power_draw") or "").removesuffix(" W"))
    assert watts == 2.42
    window = measure(FakeNvml([[], []], [int(watts * 1000), int(watts * 1000)]), 0.2)
    assert all(g.method == "power_samples" for g in window.gpus)
    assert window.gpus[0].joules == pytest.approx(watts * (window.window_s or 0), rel=0.02)


def test_measured_tokens_per_joule_is_set_against_the_plan_at_tdp(tmp_path: Path) -> None:
    with FakeServerThread({"ttft_ms": 2, "itl_ms": 2, "output_tokens": 16, "dcgm_power_w": [700.0]}) as srv:
        settings = BenchSettings(
            endpoint=ResolvedEndpoint(srv.base_url, None, None, "fake"),
            request=RequestOptions(max_tokens=16),
            load=Load(requests=8, concurrency=2, cold=False),
            output=tmp_path / "run",
            dcgm_url=f"{srv.url}/dcgm/metrics",
            efficiency=EfficiencySpec("H100-SXM", "llama-3.1-8b", "bf16", 1),
        )
        r = asyncio.run(BenchSession(settings, argv=["tokenrace", "bench"]).run())
    eff, energy = js(r.summary)["efficiency"], js(r.summary)["energy"]
    reference = eff["decode_tokens_per_joule_at_tdp"]
    assert reference and energy["output_tokens_per_joule"]
    expected = 100 * energy["output_tokens_per_joule"] / reference
    assert eff["tokens_per_joule_pct_of_tdp_reference"] == pytest.approx(expected, rel=1e-3)


def test_recorded_h100_counter_and_integrated_power_agree() -> None:
    """Real NVML readings of an H100 (tests/fixtures/nvml/h100_recorded.json: idle, then 20 s of bf16
    matrix products at the 700 W cap, every 0.5 s): the energy counter's difference and the trapezoids
    of the power samples at the same instants give the same joules within 1 % (recorded: 0.26 %)."""
    data = json.loads((Path(__file__).parents[1] / "fixtures" / "nvml" / "h100_recorded.json").read_text())
    rows = data["devices"][0]["readings"]
    first, last = (GpuReading("0", "H100", r["energy_mj"], r["power_mw"] / 1000) for r in (rows[0], rows[-1]))
    power = [(r["t_s"], r["power_mw"] / 1000) for r in rows]
    window_s = rows[-1]["t_s"] - rows[0]["t_s"]
    counted = _gpu_window(last, first, power, window_s)
    integrated = _gpu_window(replace(last, energy_mj=None), None, power, window_s)
    assert counted.method == "counter" and integrated.method == "power_samples" and integrated.samples == len(rows)
    assert counted.joules is not None and integrated.joules is not None
    assert counted.joules == pytest.approx(14_549.117)
    assert integrated.joules == pytest.approx(counted.joules, rel=0.01)


def test_the_gpus_processes_say_whose_energy_it_was() -> None:
    """NVML lists each GPU's processes: a run is told when another process shared its GPU, and when
    its server ran on none of the GPUs measured (the energy then is someone else's)."""
    nvml = SharedNvml([[1_000_000, 1_350_000], [2_000_000, 2_100_000]], [0, 0], [[41, 42], [43]])
    window = measure(nvml, 0.01)
    assert [g.pids for g in window.gpus] == [[41, 42], [43]]
    # the server is process 41: GPU 0 also ran 42; GPU 1, with no server process, is not judged
    (shared,) = sharing_warnings(window, {41})
    assert shared.code == "energy.shared_gpu" and shared.figures["gpu"] == "0" and shared.figures["pids"] == "42"
    # the server is process 7, on no GPU: all 450 J belong to other processes
    (elsewhere,) = sharing_warnings(window, {7})
    assert elsewhere.code == "energy.server_not_on_gpu" and elsewhere.figures == {
        "joules": 450.0,
        "other_pids": "41, 42, 43",
    }
    # the server cannot be found (another container): only a GPU with several processes is named
    assert [w.figures["gpu"] for w in sharing_warnings(window, None)] == ["0"]
    # the server alone on its GPU: nothing to say
    alone = measure(SharedNvml([[0, 1_000], []], [0, 100_000], [[41], []]), 0.01)
    assert sharing_warnings(alone, {41}) == []


def test_a_bench_through_nvml_names_the_gpus_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server runs in this process, which no GPU lists: the run says its energy is not its own."""
    nvml = SharedNvml([[1_000_000, 1_500_000], [5, 5]], [0, 0], [[99_999], []])
    monkeypatch.setattr("tokenrace.runs.session.NvmlEnergy", lambda: NvmlEnergy(nvml))
    with FakeServerThread({"ttft_ms": 1, "itl_ms": 1, "output_tokens": 4}) as srv:
        settings = BenchSettings(
            endpoint=ResolvedEndpoint(srv.base_url, None, None, None),
            request=RequestOptions(max_tokens=4),
            load=Load(cold=False, concurrency=1, requests=3),
            output=tmp_path / "run",
        )
        run = asyncio.run(BenchSession(settings, argv=["test"]).run())
    codes = [w.code for w in run.summary.warnings]
    assert "energy.server_not_on_gpu" in codes, codes
    energy = run.summary.energy
    assert energy is not None and [g.pids for g in energy.gpus] == [[99_999], []]
