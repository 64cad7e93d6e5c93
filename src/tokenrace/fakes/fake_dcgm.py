"""A fake DCGM exporter page: GPUs drawing a programmed constant power.

`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ since the driver loaded) grows at exactly that power
from the moment the server started, so the energy over any window is power × window;
`DCGM_FI_DEV_POWER_USAGE` (W) reads the power itself. Labels are dcgm-exporter's (`gpu`, `UUID`,
`device`, `modelName`, `Hostname`). Faults: no energy field (an exporter whose counters config
leaves it out), and a restart after some scrapes (the counters begin again near 0). Pure.
"""

from __future__ import annotations

BASE_MJ = 3.5e9  # what the counters held when the fake started: only deltas are energy


def dcgm_page(powers_w: list[float], elapsed_s: float, energy: bool = True, restarted: bool = False) -> str:
    """The exporter's text `elapsed_s` after the start; `restarted`: the counters began again at 0."""
    lines = [
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
    ]
    lines += [f"DCGM_FI_DEV_POWER_USAGE{{{_labels(i)}}} {p:.6f}" for i, p in enumerate(powers_w)]
    if energy:
        lines += [
            "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
        ]
        base = 0.0 if restarted else BASE_MJ
        for i, p in enumerate(powers_w):
            mj = base + i * 1e8 + p * elapsed_s * 1000.0
            lines.append(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{_labels(i)}}} {int(mj)}")
    return "\n".join(lines) + "\n"


def _labels(gpu: int) -> str:
    uuid = f"GPU-0000000{gpu}-d595-d1c7-d1d2-179bcfa61660"
    return f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="fake"'
