"""Record real NVML readings in the fixture format the monitor's tests replay (tests/fixtures/nvml).

Samples every GPU every `--interval` seconds, first idle for `--idle` seconds, then while `--load`
runs a command that keeps the GPUs busy, and writes the readings the monitor's `GpuSampler` asks
for (utilisation, memory, temperature, power, SM clock, clock-event reasons) plus the energy
counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ) in NVML's own units. Prints one line per sample.

    python benchmarks/record_nvml.py --output h100_recorded.json --load "python benchmarks/gpu_burn.py 20"
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from typing import Any

import pynvml


def _maybe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        return f"NVMLError {err.value}"


def reading(handle: Any) -> dict[str, Any]:
    util = _maybe(pynvml.nvmlDeviceGetUtilizationRates, handle)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {
        "t_s": round(time.monotonic(), 3),
        "util_pct": util.gpu if not isinstance(util, str) else util,
        "mem_util_pct": util.memory if not isinstance(util, str) else util,
        "mem_used_bytes": int(mem.used),
        "temp_c": _maybe(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        "power_mw": _maybe(pynvml.nvmlDeviceGetPowerUsage, handle),
        "sm_clock_mhz": _maybe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "clocks_event_reasons": _maybe(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle),
        "energy_mj": _maybe(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--about", default="")
    parser.add_argument("--idle", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--load", default=None, help="a command to run after the idle part; sampling ends with it")
    args = parser.parse_args()
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    devices: list[dict[str, Any]] = []
    for h in handles:
        name = pynvml.nvmlDeviceGetName(h)
        devices.append(
            {
                "name": name.decode() if isinstance(name, bytes) else name,
                "bus_id": pynvml.nvmlDeviceGetPciInfo(h).busId,
                "mem_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                "power_limit_mw": _maybe(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
                "readings": [],
            }
        )
    for d in devices:
        if isinstance(d["bus_id"], bytes):
            d["bus_id"] = d["bus_id"].decode()

    def sample(phase: str) -> None:
        for d, h in zip(devices, handles, strict=True):
            r = {"phase": phase, **reading(h)}
            d["readings"].append(r)
            print(json.dumps(r), flush=True)

    end = time.monotonic() + args.idle
    while time.monotonic() < end:
        sample("idle")
        time.sleep(args.interval)
    if args.load:
        proc = subprocess.Popen(shlex.split(args.load))
        while proc.poll() is None:
            sample("load")
            time.sleep(args.interval)
        sample("after")
    driver = pynvml.nvmlSystemGetDriverVersion()
    data = {
        "about": args.about or "Recorded from real NVML by benchmarks/record_nvml.py.",
        "recorded": time.strftime("%Y-%m-%d"),
        "driver": driver.decode() if isinstance(driver, bytes) else driver,
        "cuda_driver_version": pynvml.nvmlSystemGetCudaDriverVersion(),
        "devices": devices,
    }
    with open(args.output, "w") as fh:
        json.dump(data, fh, indent=1)
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
