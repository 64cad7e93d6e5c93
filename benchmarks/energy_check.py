"""Does tokenrace's NVML energy agree with nvidia-smi? Run it on a machine with an NVIDIA GPU.

For `--seconds` (optionally while `--load` runs a command that keeps the GPUs busy, e.g. a
`tokenrace bench` against a local server), tokenrace's energy meter reads each GPU's NVML energy
counter at the start and the end (`nvmlDeviceGetTotalEnergyConsumption`, mJ), while this script
polls `nvidia-smi --query-gpu=index,name,power.draw,power.limit --format=csv` every `--interval`.
Printed per GPU: the meter's joules and mean watts, nvidia-smi's mean power draw over the same
window and that × the window, and their ratio; then the meter with the counter switched off (its
power-integration fallback) for the same comparison. On a machine without a GPU it says so and exits 2.

    python benchmarks/energy_check.py
    python benchmarks/energy_check.py --seconds 30 --load "tokenrace bench --url http://127.0.0.1:8000/v1 --duration 30s"
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import shlex
import subprocess
import sys
import time
from typing import Any

from tokenrace.monitor.energy import EnergyMeter, EnergyWindow, NvmlEnergy


class WithoutCounter:
    """pynvml with the energy counter answering NOT_SUPPORTED: the meter falls back to sampled power."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nvml, name)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        raise self._nvml.NVMLError(self._nvml.NVML_ERROR_NOT_SUPPORTED)


def smi_sample() -> list[tuple[str, str, float | None, float | None]]:
    """(index, name, power draw W, power limit W) per GPU, from nvidia-smi."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,power.draw,power.limit", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.strip().splitlines():
        index, name, draw, limit = (x.strip() for x in line.split(","))
        rows.append((index, name, _num(draw), _num(limit)))
    return rows


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]"


async def measure(
    nvml: Any, seconds: float, interval: float, load: str | None
) -> tuple[EnergyWindow, dict[str, list[float]]]:
    meter = EnergyMeter(NvmlEnergy(nvml))
    smi: dict[str, list[float]] = {}
    await meter.start()
    proc = subprocess.Popen(shlex.split(load)) if load else None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for index, _, draw, _ in await asyncio.to_thread(smi_sample):
            if draw is not None:
                smi.setdefault(index, []).append(draw)
        await asyncio.sleep(interval)
    window = await meter.stop()
    if proc is not None:
        proc.wait()
    return window, smi


def report(title: str, window: EnergyWindow, smi: dict[str, list[float]]) -> None:
    print(f"\n{title}: window {window.window_s or 0:.2f} s, source {window.source}")
    if window.reason:
        print(f"  no figure: {window.reason}")
    for g in window.gpus:
        watts = smi.get(g.gpu) or []
        smi_w = sum(watts) / len(watts) if watts else None
        smi_j = None if smi_w is None or window.window_s is None else smi_w * window.window_s
        ratio = f"{g.joules / smi_j:.3f}" if g.joules is not None and smi_j else "—"
        joules = "—" if g.joules is None else f"{g.joules:.1f}"
        mean = "—" if g.mean_power_w is None else f"{g.mean_power_w:.1f}"
        smi_text = (
            "—" if smi_w is None or smi_j is None else f"{smi_w:.1f} W x window = {smi_j:.1f} J ({len(watts)} polls)"
        )
        print(f"  GPU {g.gpu} {g.name} [{g.method}]: {joules} J, {mean} W mean | nvidia-smi {smi_text} | ratio {ratio}")
        if g.reason:
            print(f"    {g.reason}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each window")
    ap.add_argument("--interval", type=float, default=0.5, help="nvidia-smi poll interval (s)")
    ap.add_argument("--load", help="a command to run during each window (it should last about --seconds)")
    args = ap.parse_args()
    try:
        import pynvml  # noqa: PLC0415 - optional at run time: without NVML the check says so

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
        first = smi_sample()
    except Exception as exc:  # noqa: BLE001 - no GPU, no driver or no nvidia-smi: nothing to check here
        print(f"no NVIDIA GPU to check on this machine ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    print(f"machine: {platform.node()}, {platform.platform()}, driver {driver}")
    for index, name, draw, limit in first:
        print(f"GPU {index}: {name}, {draw} W now, limit {limit} W")
    print(
        f"conditions: {args.seconds} s per window, nvidia-smi every {args.interval} s, load: {args.load or 'none (idle)'}"
    )
    window, smi = asyncio.run(measure(pynvml, args.seconds, args.interval, args.load))
    report("NVML energy counter", window, smi)
    window, smi = asyncio.run(measure(WithoutCounter(pynvml), args.seconds, args.interval, args.load))
    report("sampled power, integrated (the counter switched off)", window, smi)
    return 0


if __name__ == "__main__":
    sys.exit(main())
