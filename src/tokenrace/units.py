"""The grammars of the values flags and files give: durations and token sizes.

One reader each, so that `--duration 5m`, `--ramp 30s`, a stage's `30s@2`, `--monitor-interval
500ms` and `--budget 1h` read alike. (Objectives, `ttft_p99<=500ms`, are read by
`figures.objectives.parse_objective`, which `--sla`, `--expect` and `--slo` share; a price by
`figures.cost.parse_price`; image sizes by `load.workloads.images.parse_sizes`.) Errors are one line
that names the flag or field (`what`).
"""

from __future__ import annotations

import math
from typing import overload

from tokenrace.errors import UsageError

# suffix -> seconds; a bare number is seconds. `ms` is tried before `s` and `m`.
_SECONDS = (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


@overload
def parse_duration_s(text: str, what: str = ...) -> float: ...
@overload
def parse_duration_s(text: None, what: str = ...) -> None: ...
@overload
def parse_duration_s(text: str | None, what: str = ...) -> float | None: ...
def parse_duration_s(text: str | None, what: str = "duration") -> float | None:
    """`90`, `90s`, `5m`, `1h`, `250ms` -> seconds (positive and finite); None stays None."""
    if text is None:
        return None
    t = text.strip().lower()
    mult = 1.0
    for suffix, scale in _SECONDS:
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], scale
            break
    try:
        value = float(t) * mult
    except ValueError:
        raise UsageError(f"{what}: cannot read the duration {text!r} (use 90, 90s, 5m, 250ms)") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{what}: the duration must be positive, got {text!r}")
    return value


def parse_mean_std(text: str | None, what: str) -> tuple[int, float] | None:
    """Token sizes: `512` or `512,64` -> (mean, standard deviation)."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        mean = int(parts[0])
        std = float(parts[1]) if len(parts) > 1 else 0.0
    except ValueError:
        raise UsageError(f"{what}: expected MEAN or MEAN,STD in tokens, got {text!r}") from None
    if mean < 1 or std < 0 or len(parts) > 2:
        raise UsageError(f"{what}: expected MEAN>=1 and STD>=0, got {text!r}")
    return mean, std
