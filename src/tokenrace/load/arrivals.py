"""Arrival schedules for open-loop load: pure functions from (rate, process, seed) to send offsets.

- constant: one request every 1/rate s.
- poisson: exponential gaps with mean 1/rate.
- gamma: gamma gaps with shape k = burstiness and mean 1/rate (k = 1 is Poisson, k < 1 burstier,
  k > 1 smoother), the same parametrisation as vLLM's `--burstiness`.
The first request is sent at offset 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tokenrace.errors import InvalidInput

ARRIVALS = ("poisson", "constant", "gamma")


def check_arrivals(rate: float, arrival: str, burstiness: float = 1.0) -> None:
    """Raise InvalidInput unless (rate, arrival, burstiness) describe a schedule."""
    if not rate > 0:  # also refuses NaN
        raise InvalidInput("rate", f"must be positive, got {rate}")
    if arrival not in ARRIVALS:
        raise InvalidInput("arrival", f"must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if arrival == "gamma" and not burstiness > 0:
        raise InvalidInput("burstiness", f"must be positive, got {burstiness}")


def gaps(rate: float, arrival: str, burstiness: float = 1.0, seed: int | None = 0) -> Iterator[float]:
    """An endless stream of inter-arrival gaps in seconds."""
    check_arrivals(rate, arrival, burstiness)
    rng = np.random.default_rng(seed)
    mean = 1.0 / rate
    while True:
        if arrival == "constant":
            yield mean
        elif arrival == "poisson":
            yield float(rng.exponential(mean))
        else:
            yield float(rng.gamma(burstiness, mean / burstiness))


def schedule(
    rate: float,
    arrival: str = "poisson",
    *,
    count: int | None = None,
    duration_s: float | None = None,
    burstiness: float = 1.0,
    seed: int | None = 0,
) -> list[float]:
    """Send offsets in seconds: `count` of them, or all that fall before `duration_s`."""
    if count is None and duration_s is None:
        raise InvalidInput("requests", "an open-loop run needs a request count or a duration")
    offsets: list[float] = []
    t = 0.0
    it = gaps(rate, arrival, burstiness, seed)
    while (count is None or len(offsets) < count) and (duration_s is None or t < duration_s):
        offsets.append(t)
        t += next(it)
    return offsets
