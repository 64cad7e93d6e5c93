"""Running totals over timeseries samples -> the resource summary (peaks, means, max queue).

Totals are kept incrementally, so an hour-long monitor holds a few numbers, not every sample. A
figure with no samples behind it is None.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tokenrace.model.monitor import (
    GpuFigures,
    GpuResources,
    GpuSample,
    Number,
    ServerResources,
    ServerSample,
    SystemResources,
    SystemSample,
    TimeseriesLine,
)


@dataclass(slots=True)
class Stat:
    count: int = 0
    total: float = 0.0
    low: Number | None = None
    high: Number | None = None

    def add(self, v: Number | None) -> None:
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
    def max(self) -> Number | None:
        return self.high

    @property
    def min(self) -> Number | None:
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

    def add(self, g: GpuSample) -> None:
        self.util.add(g.util_pct)
        self.mem_used.add(g.mem_used_bytes)
        self.mem_total = g.mem_total_bytes or self.mem_total
        self.temp.add(g.temp_c)
        self.power.add(g.power_w)
        self.clock.add(g.sm_clock_mhz)
        self.throttle.update(g.throttle or ())

    def summary(self, index: int) -> GpuFigures:
        return GpuFigures(
            index=index,
            name=self.name,
            util_pct_mean=self.util.mean,
            util_pct_max=self.util.max,
            peak_mem_used_bytes=_int(self.mem_used.max),
            mem_total_bytes=self.mem_total,
            temp_c_max=self.temp.max,
            power_w_mean=self.power.mean,
            power_w_max=self.power.max,
            sm_clock_mhz_min=self.clock.min,
            sm_clock_mhz_max=self.clock.max,
            throttle_samples=dict(self.throttle),
        )


@dataclass(slots=True)
class SystemTotals:
    samples: int = 0
    mem_total: int | None = None
    cpu: Stat = field(default_factory=Stat)
    mem_used: Stat = field(default_factory=Stat)
    net_rx: Stat = field(default_factory=Stat)
    net_tx: Stat = field(default_factory=Stat)
    net_loopback: Stat = field(default_factory=Stat)
    proc_cpu: Stat = field(default_factory=Stat)
    proc_rss: Stat = field(default_factory=Stat)

    def add(self, s: SystemSample) -> None:
        self.samples += 1
        self.mem_total = s.mem_total_bytes or self.mem_total
        self.cpu.add(s.cpu_pct)
        self.mem_used.add(s.mem_used_bytes)
        self.net_rx.add(s.net_rx_bytes_per_s)
        self.net_tx.add(s.net_tx_bytes_per_s)
        self.net_loopback.add(s.net_loopback_bytes_per_s)
        self.proc_cpu.add(s.proc_cpu_pct)
        self.proc_rss.add(s.proc_rss_bytes)

    def summary(self) -> SystemResources | None:
        if not self.samples:
            return None
        return SystemResources(
            cpu_pct_mean=self.cpu.mean,
            cpu_pct_max=self.cpu.max,
            peak_mem_used_bytes=_int(self.mem_used.max),
            mem_total_bytes=self.mem_total,
            net_rx_bytes_per_s_mean=self.net_rx.mean,
            net_rx_bytes_per_s_max=self.net_rx.max,
            net_tx_bytes_per_s_mean=self.net_tx.mean,
            net_tx_bytes_per_s_max=self.net_tx.max,
            net_loopback_bytes_per_s_mean=self.net_loopback.mean,
            net_loopback_bytes_per_s_max=self.net_loopback.max,
            proc_cpu_pct_mean=self.proc_cpu.mean,
            proc_cpu_pct_max=self.proc_cpu.max,
            proc_peak_rss_bytes=_int(self.proc_rss.max),
        )


@dataclass(slots=True)
class ServerTotals:
    samples: int = 0
    engine: str | None = None
    running: Stat = field(default_factory=Stat)
    waiting: Stat = field(default_factory=Stat)
    kv_cache: Stat = field(default_factory=Stat)
    generation: Stat = field(default_factory=Stat)
    scrape: Stat = field(default_factory=Stat)
    preemptions: Stat = field(default_factory=Stat)

    def add(self, s: ServerSample) -> None:
        self.samples += 1
        self.engine = s.engine or self.engine
        self.running.add(s.running)
        self.waiting.add(s.waiting)
        self.kv_cache.add(s.kv_cache_usage)
        self.generation.add(s.generation_tokens_per_s)
        self.scrape.add(s.scrape_ms)
        self.preemptions.add(s.preemptions_total)

    def summary(self) -> ServerResources | None:
        if not self.samples:
            return None
        p = self.preemptions
        return ServerResources(
            engine=self.engine,
            running_max=self.running.max,
            running_mean=self.running.mean,
            waiting_max=self.waiting.max,  # the longest queue seen
            waiting_mean=self.waiting.mean,
            kv_cache_usage_max=self.kv_cache.max,
            kv_cache_usage_mean=self.kv_cache.mean,
            generation_tokens_per_s_mean=self.generation.mean,
            # Preemptions during the monitored span (the counter is cumulative since the server began).
            preemptions=None if p.max is None or p.min is None else _int(p.max - p.min),
            scrape_ms_max=self.scrape.max,
        )


class Aggregator:
    def __init__(self) -> None:
        self.samples = 0
        self.gpus: dict[int, GpuTotals] = {}
        self.gpu_all = GpuTotals("all")
        self.system = SystemTotals()
        self.server = ServerTotals()

    def add(self, sample: TimeseriesLine) -> None:
        self.samples += 1
        for position, g in enumerate(sample.gpu or ()):
            index = g.index if g.index is not None else position
            self.gpus.setdefault(index, GpuTotals(g.name or "")).add(g)
            self.gpu_all.add(g)
        if sample.system is not None:
            self.system.add(sample.system)
        if sample.server is not None:
            self.server.add(sample.server)

    def gpu(self) -> GpuResources | None:
        if not self.gpus:
            return None
        per = [t.summary(i) for i, t in sorted(self.gpus.items())]
        peak = max(per, key=lambda p: p.peak_mem_used_bytes or -1)
        a = self.gpu_all
        return GpuResources(
            count=len(per),
            util_pct_mean=a.util.mean,  # over every sample of every GPU
            util_pct_max=a.util.max,
            peak_mem_used_bytes=peak.peak_mem_used_bytes,  # the fullest GPU's peak
            peak_mem_total_bytes=peak.mem_total_bytes,
            temp_c_max=a.temp.max,
            power_w_mean=a.power.mean,  # per GPU
            power_w_max=a.power.max,
            sm_clock_mhz_min=a.clock.min,
            sm_clock_mhz_max=a.clock.max,
            throttle_samples=dict(a.throttle),
            per_gpu=per,
        )


def _int(v: Number | None) -> int | None:
    return None if v is None else int(v)
