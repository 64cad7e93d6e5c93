"""Clocks of workers: the offset of a worker's `perf_counter_ns()` from the parent's, and stamps moved
onto the parent's clock.

On Linux `time.perf_counter_ns()` reads CLOCK_MONOTONIC, one clock per running kernel: every process
of one machine reads the same one, so stamps taken in different worker processes compare exactly and
no correction is applied. Workers on other machines (Ray nodes) read other clocks with other origins.
Their offset is estimated the way NTP does: the parent stamps t1, asks the worker for its clock (tw),
stamps t2 on the answer; `tw - (t1 + t2) / 2` is off by at most half the round trip t2 - t1, so the
probe with the shortest round trip of several is kept, and its half round trip is the error bound.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tokenrace.model.records import CLOCK_STAMPS, RequestRecord

perf_ns = time.perf_counter_ns


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """A worker's clock minus the parent's, in ns, from the probe with the shortest round trip."""

    offset_ns: int
    rtt_ns: int
    probes: int
    shared: bool  # the worker reads the parent's own clock (same kernel): nothing is applied

    @property
    def error_ns(self) -> int:
        """The estimate is within ± this of the truth."""
        return self.rtt_ns // 2

    @property
    def applied_ns(self) -> int:
        """What is subtracted from the worker's stamps: 0 where the clock is the parent's own."""
        return 0 if self.shared else self.offset_ns


def best_offset(samples: Sequence[tuple[int, int, int]]) -> tuple[int, int]:
    """(offset, rtt) from probes (t1 parent sent, tw worker's clock, t2 parent received): the
    minimum round trip's midpoint estimate."""
    if not samples:
        raise ValueError("no clock probe answered")
    t1, tw, t2 = min(samples, key=lambda s: s[2] - s[0])
    return tw - (t1 + t2) // 2, t2 - t1


async def probe(ask: Callable[[], Awaitable[int]], shared: bool, probes: int = 16) -> ClockOffset:
    """Ask the worker's clock `probes` times; `ask` returns its `perf_counter_ns()`."""
    samples = []
    for _ in range(probes):
        t1 = perf_ns()
        tw = await ask()
        samples.append((t1, tw, perf_ns()))
    offset, rtt = best_offset(samples)
    return ClockOffset(offset, rtt, probes, shared)


def to_worker_clock(parent_ns: int | None, offset: ClockOffset) -> int | None:
    return None if parent_ns is None else parent_ns + offset.applied_ns


def to_parent_clock(rec: RequestRecord, offset: ClockOffset) -> None:
    """Move every absolute stamp a worker took onto the parent's clock (durations are unchanged)."""
    d = offset.applied_ns
    if d == 0:
        return
    for name in CLOCK_STAMPS:
        value = getattr(rec, name)
        if value is not None:
            setattr(rec, name, value - d)
    rec.chunk_ns = [t - d for t in rec.chunk_ns]
