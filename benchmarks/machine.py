"""What the machine under a benchmark is doing besides the benchmark.

`stalls()`: how often each vCPU stops running a busy loop for more than 200 us. On a virtual machine
the host takes the vCPU away now and then (other tenants, its own work), as does any other busy
process here (so run it on a quiet machine); a request in flight
through that vCPU at such a moment waits out the stall, so when stalls take ~1 % of the time they
set the p99 of any latency that crosses that vCPU, whatever the software does.
"""

from __future__ import annotations

import os
import subprocess
import sys

_PROBE = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.perf_counter_ns() + int(float(sys.argv[2]) * 1e9)
last = time.perf_counter_ns()
gaps = []
while last < end:
    t = time.perf_counter_ns()
    if t - last > 200_000:
        gaps.append(t - last)
    last = t
print(len(gaps), sum(g > 1e6 for g in gaps), sum(gaps) / 1e6, max(gaps, default=0) / 1e6)
"""


def stall_stats(cores: list[int] | None = None, seconds: float = 3.0) -> dict[int, dict[str, float]]:
    """Per core: stalls over 200 us per second, over 1 ms per second, the share of time lost, the longest (ms)."""
    out = {}
    for core in cores if cores is not None else sorted(os.sched_getaffinity(0)):
        n, over_ms, lost_ms, worst_ms = subprocess.run(
            [sys.executable, "-c", _PROBE, str(core), str(seconds)], capture_output=True, text=True, check=True
        ).stdout.split()
        out[core] = {
            "per_s": int(n) / seconds,
            "over_1ms_per_s": int(over_ms) / seconds,
            "lost_pct": float(lost_ms) / seconds / 10,
            "longest_ms": float(worst_ms),
        }
    return out


def describe_stalls(stats: dict[int, dict[str, float]]) -> str:
    return "; ".join(
        f"core {core}: {s['per_s']:.0f}/s ({s['over_1ms_per_s']:.1f}/s over 1 ms), {s['lost_pct']:.2f}% of the time lost, "
        f"longest {s['longest_ms']:.1f} ms"
        for core, s in stats.items()
    )


def stalls(cores: list[int] | None = None, seconds: float = 3.0) -> str:
    """One line: per core, stalls over 200 us and over 1 ms per second, the share of time lost, the longest."""
    return describe_stalls(stall_stats(cores, seconds))
