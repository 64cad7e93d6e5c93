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


def stalls(cores: list[int] | None = None, seconds: float = 3.0) -> str:
    """One line: per core, stalls over 200 us and over 1 ms per second, the share of time lost, the longest."""
    out = []
    for core in cores if cores is not None else sorted(os.sched_getaffinity(0)):
        n, over_ms, lost_ms, worst_ms = subprocess.run(
            [sys.executable, "-c", _PROBE, str(core), str(seconds)], capture_output=True, text=True, check=True
        ).stdout.split()
        out.append(
            f"core {core}: {int(n) / seconds:.0f}/s ({int(over_ms) / seconds:.1f}/s over 1 ms), "
            f"{float(lost_ms) / seconds / 10:.2f}% of the time lost, longest {float(worst_ms):.1f} ms"
        )
    return "; ".join(out)
