"""Energy per output token: `energy` in the summary, from the GPUs' energy over the load.

joules is the sum over GPUs (None when any GPU's figure is missing: a partial sum would flatter
the run); the tokens are every output token generated while the meter ran (cold, warm-up and
measured requests alike, since all of them drew the power). Tokens per joule is the efficiency
twin of tokens per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from tokenrace.model.records import RequestRecord
from tokenrace.model.sections import Energy, GpuEnergy
from tokenrace.monitor.energy import EnergyWindow


def energy_section(window: EnergyWindow | None, records: Sequence[RequestRecord]) -> Energy | None:
    if window is None:
        return None
    gpus = [GpuEnergy.model_validate(asdict(g)) for g in window.gpus]
    methods = {g.method for g in window.gpus if g.joules is not None}
    missing = [g for g in window.gpus if g.joules is None]
    reason = window.reason
    if reason is None and missing:
        reason = "; ".join(f"GPU {g.gpu}: {g.reason}" for g in missing)
    joules = None if reason is not None or not window.gpus else sum(g.joules or 0.0 for g in window.gpus)
    tokens = sum(r.output_tokens or 0 for r in records)
    return Energy.model_validate(
        {
            "source": window.source,
            "method": None if not methods else (methods.pop() if len(methods) == 1 else "mixed"),
            "window_s": None if window.window_s is None else round(window.window_s, 6),
            "joules": joules,
            "output_tokens": tokens,
            "joules_per_output_token": joules / tokens if joules is not None and tokens else None,
            "output_tokens_per_joule": tokens / joules if joules else None,
            "mean_power_w": joules / window.window_s if joules is not None and window.window_s else None,
            "gpus": gpus,
            "reason": reason,
        }
    )
