"""The marks the runner takes while a load runs, which the throughput figures need."""

from __future__ import annotations

from dataclasses import dataclass

from tokenrace.load.saturation import Stop


@dataclass(slots=True)
class Windows:
    """perf_counter_ns marks the runner took while the load ran."""

    steady_start_ns: int | None = None  # target concurrency first reached (closed loop)
    steady_end_ns: int | None = None  # the first worker found no more work (closed loop)
    max_in_flight: int = 0
    offered_rate: float | None = None  # requests/s the schedule asked for (open loop)
    stopped: Stop | None = None  # the open loop stopped early: the server was over-saturated
