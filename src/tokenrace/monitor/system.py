"""This machine's CPU, memory and network, and this process (the client), through psutil.

Rates need two readings, so `open()` takes the first one: CPU percentages and network bytes/s in a
sample cover the time since the previous sample (or since `open()`). A rate over no elapsed time is
None, never 0.

Network figures leave the loopback interface out: traffic to a server on this machine is a memory
copy, not load on the wire. It is reported on its own as `net_loopback_bytes_per_s`.
"""

from __future__ import annotations

import time

import psutil

from tokenrace.model.monitor import SystemSample


class SystemSampler:
    name = "system"

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._last_net: tuple[float, int, int, int] | None = None  # (monotonic s, rx, tx, loopback) bytes
        self._loopback: set[str] = set()

    def open(self) -> None:
        # psutil's percentages compare with the previous call; the first call only sets the base.
        psutil.cpu_percent(interval=None)
        self._proc.cpu_percent(interval=None)
        self._loopback = _loopback_names()
        self._last_net = self._net_now()

    def sample(self) -> SystemSample:
        mem = psutil.virtual_memory()
        rx, tx, lo = self._net_rates()
        return SystemSample(
            cpu_pct=float(psutil.cpu_percent(interval=None)),  # all cores: 100 = every core busy
            # total - available: what the OS could not hand out now (page cache is not counted).
            mem_used_bytes=int(mem.total - mem.available),
            mem_total_bytes=int(mem.total),
            net_rx_bytes_per_s=rx,
            net_tx_bytes_per_s=tx,
            net_loopback_bytes_per_s=lo,
            # One core = 100, as in top: the client's event loop is one thread, so ~100 is its limit.
            proc_cpu_pct=float(self._proc.cpu_percent(interval=None)),
            proc_rss_bytes=int(self._proc.memory_info().rss),
        )

    def close(self) -> None:
        self._last_net = None

    def _net_now(self) -> tuple[float, int, int, int]:
        rx = tx = lo = 0
        for nic, c in psutil.net_io_counters(pernic=True).items():
            if nic in self._loopback:
                lo += int(c.bytes_recv)  # on loopback every byte sent is also received
            else:
                rx += int(c.bytes_recv)
                tx += int(c.bytes_sent)
        return time.monotonic(), rx, tx, lo

    def _net_rates(self) -> tuple[float | None, float | None, float | None]:
        now = self._net_now()
        last, self._last_net = self._last_net, now
        if last is None or now[0] <= last[0]:
            return None, None, None
        dt = now[0] - last[0]
        # Counters can wrap or reset (an interface going away): a negative delta is unknown, not 0.
        return _per_s(now[1] - last[1], dt), _per_s(now[2] - last[2], dt), _per_s(now[3] - last[3], dt)


def _per_s(delta: int, dt: float) -> float | None:
    return round(delta / dt, 1) if delta >= 0 else None


def _loopback_names() -> set[str]:
    names = {"lo"}
    for nic, st in psutil.net_if_stats().items():
        if "loopback" in (getattr(st, "flags", "") or ""):
            names.add(nic)
    return names
