"""Measure this machine's memory bandwidth with a short numpy copy probe.

Method (STREAM "copy" style): one pair of source/destination buffers per usable CPU, together larger
than twice the last-level cache, so that the copy streams from DRAM. Every thread copies its own pair
at the same time (numpy releases the GIL while copying), and a round moves 2 × buffer bytes: one read
and one write of each byte. Large copies use non-temporal stores, so no extra read-for-ownership is
counted. The best round within the time budget is the figure: the peak is what a bound needs.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

MIN_BUFFER_BYTES = 256 * 2**20
MAX_BUFFER_BYTES = 2 * 2**30
MIN_ROUNDS = 3
MAX_ROUNDS = 200


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def last_level_cache_bytes() -> int | None:
    """The largest cache Linux reports for cpu0, or None when unknown."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def probe_buffer_bytes() -> int:
    """Source bytes per round: at least 256 MiB, and at least the last-level cache (so src + dst ≥ 2 × LLC)."""
    llc = last_level_cache_bytes() or 0
    return min(max(MIN_BUFFER_BYTES, llc), MAX_BUFFER_BYTES)


def measure_cpu_bandwidth(
    seconds: float = 0.3, *, buffer_bytes: int | None = None, threads: int | None = None
) -> float:
    """Memory bandwidth in bytes/s: the best multi-threaded copy round within `seconds` (at least 3 rounds)."""
    workers = max(1, threads or usable_cpus())
    total = buffer_bytes or probe_buffer_bytes()
    per = max(total // workers // 8, 1)
    sources = [np.ones(per, dtype=np.float64) for _ in range(workers)]
    targets = [np.zeros(per, dtype=np.float64) for _ in range(workers)]  # touched now, so page faults are not timed
    moved = 2 * per * 8 * workers  # each byte read once and written once
    best = 0.0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        deadline = time.perf_counter() + seconds
        for rounds in range(MAX_ROUNDS):
            if rounds >= MIN_ROUNDS and time.perf_counter() > deadline:
                break
            start = time.perf_counter()
            list(pool.map(lambda i: np.copyto(targets[i], sources[i]), range(workers)))
            elapsed = time.perf_counter() - start
            best = max(best, moved / elapsed)
    return best


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_model_name() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
