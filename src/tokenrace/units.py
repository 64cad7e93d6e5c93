"""The grammars of the values flags and files give: durations, token sizes, lists of rates or
concurrencies, image sizes and prices.

One reader each, so that `--duration 5m`, `--ramp 30s`, a stage's `30s@2`, `--monitor-interval
500ms` and `--budget 1h` read alike. (Objectives, `ttft_p99<=500ms`, are read by
`figures.objectives.parse_objective`, which `--sla`, `--expect` and `--slo` share.) Errors are one
line that names the flag or field (`what`).
"""

from __future__ import annotations

import math
from typing import overload

from tokenrace.errors import InvalidInput, UsageError

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


def parse_values(text: str | None, what: str) -> tuple[float, ...] | None:
    """Rates, concurrencies or lengths: `1,2,4,8` -> (1.0, 2.0, 4.0, 8.0), each positive."""
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{what}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 or not math.isfinite(v) for v in values):
        raise UsageError(f"{what}: expected positive numbers, got {text!r}")
    return values


def parse_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """Image sizes: `512x512,1024x768` -> ((512, 512), (1024, 768))."""
    sizes = []
    for part in text.split(","):
        w, sep, h = part.strip().lower().partition("x")
        if not sep or not w.isdigit() or not h.isdigit():
            raise InvalidInput(
                "image_size", f"cannot read {part.strip()!r}: use WxH, or a list such as 512x512,1024x768"
            )
        sizes.append((int(w), int(h)))
    return tuple(sizes)


def parse_price_per_m(text: str) -> tuple[float, float]:
    """A price in US$ per million tokens: `in=0.59,out=0.79` -> (input, output)."""
    parts: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        try:
            parts[name.strip().lower()] = float(value)
        except ValueError:
            raise InvalidInput("price", f"expected in=X,out=Y in $ per million tokens, got {text!r}") from None
    if set(parts) != {"in", "out"} or min(parts.values()) < 0:
        raise InvalidInput("price", f"expected in=X,out=Y (both, not negative) in $ per million tokens, got {text!r}")
    return parts["in"], parts["out"]
