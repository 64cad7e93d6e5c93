"""Distribution statistics, one implementation for every metric.

`describe` returns count, mean, std, min, p50, p90, p95, p99, max. With no values every statistic
but count is None: an undefined figure is never reported as 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)
KEYS = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max")


def describe(values: Sequence[float], weights: Sequence[int] | None = None) -> dict[str, float | int | None]:
    """Summary statistics. Integer `weights` count each value that many times (e.g. tokens)."""
    arr = np.asarray(values, dtype=float)
    if weights is not None:
        arr = np.repeat(arr, np.asarray(weights, dtype=int))
    if arr.size == 0:
        return {k: (0 if k == "count" else None) for k in KEYS}
    pct = np.percentile(arr, PERCENTILES)
    out: dict[str, float | int | None] = {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else None,
        "min": float(arr.min()),
    }
    for p, v in zip(PERCENTILES, pct, strict=False):
        out[f"p{p}"] = float(v)
    out["max"] = float(arr.max())
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}
