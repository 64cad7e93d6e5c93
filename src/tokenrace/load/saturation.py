"""Over-saturation: an open-loop run whose server no longer keeps up, stopped early (docs/workloads.md).

An open loop sends on its schedule whatever the server does. Past the server's capacity the queue
grows without end, each request waits longer than the one before, and every further second measures
only the queue. The runner samples itself every `interval_s` and stops when, over the last
`window_s`, all three hold:

- requests end more slowly than they are sent: ends per second < `keep_up` x sends per second;
- requests in flight keep growing: a positive least-squares slope, and at least `min_growth` more in
  flight at the end of the window than at its start;
- TTFT keeps rising: a positive least-squares slope of TTFT against the first token's arrival, over
  at least `min_points` requests, and the later half's median above the earlier half's.

Not before `min_s` from the start of the measured phase (a queue forms briefly at any start). The
same signals as guidellm's over-saturation stop (concurrency and TTFT slopes), with fixed thresholds
instead of its margin-of-error test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np


@dataclass(frozen=True, slots=True)
class SaturationRule:
    window_s: float = 5.0
    min_s: float = 5.0
    interval_s: float = 0.5
    keep_up: float = 0.9
    min_growth: int = 2
    min_points: int = 5


@dataclass(frozen=True, slots=True)
class Tick:
    t_s: float  # seconds since the measured phase began
    sent: int  # sends so far
    ended: int  # requests ended so far
    in_flight: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Why the run stopped: the window's figures."""

    after_s: float
    window_s: float
    send_rate: float  # requests sent per second over the window
    end_rate: float  # requests ended per second over the window
    in_flight_start: int
    in_flight_end: int
    ttft_ms_start: float  # median TTFT of the window's earlier half
    ttft_ms_end: float  # ... and of its later half

    def message(self) -> str:
        return (
            f"stopped: over-saturated after {self.after_s:.1f} s: over the last {self.window_s:.0f} s requests ended "
            f"at {self.end_rate:.2f}/s while {self.send_rate:.2f}/s were sent, {self.in_flight_start} -> "
            f"{self.in_flight_end} in flight, TTFT median {self.ttft_ms_start:.0f} -> {self.ttft_ms_end:.0f} ms"
        )


@dataclass(slots=True)
class Detector:
    rule: SaturationRule = field(default_factory=SaturationRule)
    ticks: list[Tick] = field(default_factory=list)

    def check(self, tick: Tick, ttfts: Sequence[tuple[float, float]]) -> Stop | None:
        """Add a sample; `ttfts` are (first token's time in s, TTFT ms) of requests so far. A Stop when
        the run is over-saturated."""
        self.ticks.append(tick)
        r = self.rule
        if tick.t_s < r.min_s:
            return None
        window = [t for t in self.ticks if t.t_s >= tick.t_s - r.window_s]
        first, last = window[0], window[-1]
        span = last.t_s - first.t_s
        if span < r.window_s * 0.8:
            return None
        send_rate = (last.sent - first.sent) / span
        end_rate = (last.ended - first.ended) / span
        if not end_rate < r.keep_up * send_rate:
            return None
        flight = [t.in_flight for t in window]
        if last.in_flight - first.in_flight < r.min_growth or _slope([t.t_s for t in window], flight) <= 0:
            return None
        recent = sorted(p for p in ttfts if p[0] >= first.t_s)
        if len(recent) < r.min_points or _slope([p[0] for p in recent], [p[1] for p in recent]) <= 0:
            return None
        half = len(recent) // 2
        early, late = median(p[1] for p in recent[:half]), median(p[1] for p in recent[half:])
        if not late > early:
            return None
        return Stop(tick.t_s, r.window_s, send_rate, end_rate, first.in_flight, last.in_flight, early, late)


def _slope(x: Sequence[float], y: Sequence[float]) -> float:
    if len(x) < 2 or np.ptp(np.asarray(x, dtype=float)) == 0:
        return 0.0
    return float(np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)[0])
