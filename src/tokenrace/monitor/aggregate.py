"""Running totals over timeseries samples -> the resource summary (peaks, means, max queue).

Totals are kept incrementally, so an hour-long monitor holds a few numbers, not every sample. A
figure with no samples behind it is None.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Stat:
    count: int = 0
    total: float = 0.0
    low: float | None = None
    high: float | None = None

    def add(self, v: float | None) -> None:
        if v is None:
            return
        self.count += 1
        self.total += v
        self.low = v if self.low is None or v < self.low else self.low
        self.high = v if self.high is None or v > self.high else self.high

    @property
    def mean(self) -> float | None:
        return round(self.total / self.count, 3) if self.count else None

    @property
    def max(self) -> float | None:
        return self.high

    @property
    def min(self) -> float | None:
        return self.low


@dataclass(slots=True)
class GpuTotals:
    name: str
    util: Stat = field(default_factory=Stat)
    mem_used: Stat = field(default_factory=Stat)
    mem_total: int | None = None
    temp: Stat = field(default_factory=Stat)
    power: Stat = field(default_factory=Stat)
    clock: Stat = field(default_factory=Stat)
    throttle: Counter[str] = field(default_factory=Counter)  # reason -> samples it was active in

    def add(self, g: dict[str, Any]) -> None:
        self.util.add(g.get("util_pct"))
        self.mem_used.add(g.get("mem_used_bytes"))
        self.mem_total = g.get("mem_total_bytes") or self.mem_total
        self.temp.add(g.get("temp_c"))
        self.power.add(g.get("power_w"))
        self.clock.add(g.get("sm_clock_mhz"))
        self.throttle.update(g.get("throttle") or ())

    def summary(self, index: int) -> dict[str, Any]:
        return {
            "index": index,
            "name": self.name,
            "util_pct_mean": self.util.mean,
            "util_pct_max": self.util.max,
            "peak_mem_used_bytes": _int(self.mem_used.max),
            "mem_total_bytes": self.mem_total,
            "temp_c_max": self.temp.max,
            "power_w_mean": self.power.mean,
            "power_w_max": self.power.max,
            "sm_clock_mhz_min": self.clock.min,
            "sm_clock_mhz_max": self.clock.max,
            "throttle_samples": dict(self.throttle),
        }


SYSTEM_STATS = (
    "cpu_pct",
    "mem_used_bytes",
    "net_rx_bytes_per_s",
    "net_tx_bytes_per_s",
    "net_loopback_bytes_per_s",
    "proc_cpu_pct",
    "proc_rss_bytes",
)
SERVER_STATS = ("running", "waiting", "kv_cache_usage", "generation_tokens_per_s", "scrape_ms")


class Aggregator:
    def __init__(self) -> None:
        self.samples = 0
        self.gpus: dict[int, GpuTotals] = {}
        self.gpu_all = GpuTotals("all")
        self.system = {k: Stat() for k in SYSTEM_STATS}
        self.system_samples = 0
        self.mem_total: int | None = None
        self.server = {k: Stat() for k in SERVER_STATS}
        self.server_samples = 0
        self.engine: str | None = None
        self.preemptions: Stat = Stat()

    def add(self, sample: dict[str, Any]) -> None:
        self.samples += 1
        for g in sample.get("gpu") or ():
            self.gpus.setdefault(g["index"], GpuTotals(g.get("name") or "")).add(g)
            self.gpu_all.add(g)
        sysd = sample.get("system")
        if sysd:
            self.system_samples += 1
            self.mem_total = sysd.get("mem_total_bytes") or self.mem_total
            for k, stat in self.system.items():
                stat.add(sysd.get(k))
        srv = sample.get("server")
        if srv:
            self.server_samples += 1
            self.engine = srv.get("engine") or self.engine
            for k, stat in self.server.items():
                stat.add(srv.get(k))
            self.preemptions.add(srv.get("preemptions_total"))

    def summary(self) -> dict[str, Any]:
        return {"samples": self.samples, "gpu": self._gpu(), "system": self._system(), "server": self._server()}

    def _gpu(self) -> dict[str, Any] | None:
        if not self.gpus:
            return None
        per = [t.summary(i) for i, t in sorted(self.gpus.items())]
        peak = max(per, key=lambda p: p["peak_mem_used_bytes"] or -1)
        a = self.gpu_all
        return {
            "count": len(per),
            "util_pct_mean": a.util.mean,  # over every sample of every GPU
            "util_pct_max": a.util.max,
            "peak_mem_used_bytes": peak["peak_mem_used_bytes"],  # the fullest GPU's peak
            "peak_mem_total_bytes": peak["mem_total_bytes"],
            "temp_c_max": a.temp.max,
            "power_w_mean": a.power.mean,  # per GPU
            "power_w_max": a.power.max,
            "sm_clock_mhz_min": a.clock.min,
            "sm_clock_mhz_max": a.clock.max,
            "throttle_samples": dict(a.throttle),
            "per_gpu": per,
        }

    def _system(self) -> dict[str, Any] | None:
        if not self.system_samples:
            return None
        s = self.system
        return {
            "cpu_pct_mean": s["cpu_pct"].mean,
            "cpu_pct_max": s["cpu_pct"].max,
            "peak_mem_used_bytes": _int(s["mem_used_bytes"].max),
            "mem_total_bytes": self.mem_total,
            "net_rx_bytes_per_s_mean": s["net_rx_bytes_per_s"].mean,
            "net_rx_bytes_per_s_max": s["net_rx_bytes_per_s"].max,
            "net_tx_bytes_per_s_mean": s["net_tx_bytes_per_s"].mean,
            "net_tx_bytes_per_s_max": s["net_tx_bytes_per_s"].max,
            "net_loopback_bytes_per_s_mean": s["net_loopback_bytes_per_s"].mean,
            "net_loopback_bytes_per_s_max": s["net_loopback_bytes_per_s"].max,
            "proc_cpu_pct_mean": s["proc_cpu_pct"].mean,
            "proc_cpu_pct_max": s["proc_cpu_pct"].max,
            "proc_peak_rss_bytes": _int(s["proc_rss_bytes"].max),
        }

    def _server(self) -> dict[str, Any] | None:
        if not self.server_samples:
            return None
        s = self.server
        p = self.preemptions
        return {
            "engine": self.engine,
            "running_max": s["running"].max,
            "running_mean": s["running"].mean,
            "waiting_max": s["waiting"].max,  # the longest queue seen
            "waiting_mean": s["waiting"].mean,
            "kv_cache_usage_max": s["kv_cache_usage"].max,
            "kv_cache_usage_mean": s["kv_cache_usage"].mean,
            "generation_tokens_per_s_mean": s["generation_tokens_per_s"].mean,
            # Preemptions during the monitored span (the counter is cumulative since the server began).
            "preemptions": None if p.max is None or p.min is None else _int(p.max - p.min),
            "scrape_ms_max": s["scrape_ms"].max,
        }


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)
