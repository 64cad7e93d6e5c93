"""Text for people: one live line per sample, and the resource summary as a few lines.

Undefined figures print as an em dash, never as 0.
"""

from __future__ import annotations

from tokenrace.model.monitor import GpuSample, Resources, ServerSample, SystemSample, TimeseriesLine

GIB = 2**30
MIB = 2**20
DASH = "—"


def _num(v: float | None, fmt: str = ".0f", unit: str = "") -> str:
    return DASH if v is None else f"{v:{fmt}}{unit}"


def _gib(v: float | None) -> str:
    return DASH if v is None else f"{v / GIB:.1f}"


def _rate(v: float | None) -> str:
    """bytes/s as the shortest readable unit."""
    if v is None:
        return DASH
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if v >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v:.0f} B/s"


def live_line(sample: TimeseriesLine) -> str:
    parts = [f"{(sample.t_ms or 0) / 1000:6.1f} s"]
    gpus = sample.gpu or []
    if len(gpus) > 2:
        parts.append(_gpus_compact(gpus))
    else:
        parts += [_gpu(g) for g in gpus]
    if sample.system is not None:
        parts.append(_system(sample.system))
    if sample.server is not None:
        parts.append(_server(sample.server))
    return " | ".join(parts)


def _gpu(g: GpuSample) -> str:
    return (
        f"GPU{g.index} {_num(g.util_pct)}% {_gib(g.mem_used_bytes)}/{_gib(g.mem_total_bytes)} GiB "
        f"{_num(g.temp_c)}°C {_num(g.power_w)} W {_num(g.sm_clock_mhz)} MHz"
    )


def _gpus_compact(gpus: list[GpuSample]) -> str:
    util = [g.util_pct for g in gpus if g.util_pct is not None]
    mem = [g.mem_used_bytes for g in gpus if g.mem_used_bytes is not None]
    temp = [g.temp_c for g in gpus if g.temp_c is not None]
    power = [g.power_w for g in gpus if g.power_w is not None]
    return (
        f"{len(gpus)} GPUs {_num(sum(util) / len(util) if util else None)}% mean, "
        f"mem max {_gib(max(mem) if mem else None)} GiB, {_num(max(temp) if temp else None)}°C max, "
        f"{_num(sum(power) if power else None)} W"
    )


def _system(s: SystemSample) -> str:
    return (
        f"CPU {_num(s.cpu_pct)}% mem {_gib(s.mem_used_bytes)}/{_gib(s.mem_total_bytes)} GiB "
        f"net ↓{_rate(s.net_rx_bytes_per_s)} ↑{_rate(s.net_tx_bytes_per_s)} "
        f"lo {_rate(s.net_loopback_bytes_per_s)} "
        f"client {_num(s.proc_cpu_pct)}%"
    )


def _server(s: ServerSample) -> str:
    kv = s.kv_cache_usage
    return (
        f"{s.engine} run {_num(s.running, 'g')} wait {_num(s.waiting, 'g')} "
        f"kv {_num(None if kv is None else kv * 100)}%"
    )


def summary_lines(r: Resources) -> list[str]:
    lines = [f"samples: {r.samples} every {_num(r.interval_s, 'g')} s over {_num(r.duration_s, '.1f')} s"]
    lines.append(_gpu_summary(r))
    lines.append(_system_summary(r))
    lines.append(_server_summary(r))
    return [ln for ln in lines if ln]


def _why_missing(r: Resources, name: str) -> str:
    s = r.samplers.get(name)
    if s is not None and s.status == "off":
        return "off"
    return (s.reason if s is not None else None) or "no samples"


def _gpu_summary(r: Resources) -> str:
    g = r.gpu
    if g is None:
        return f"GPU: none — {_why_missing(r, 'gpu')}"
    names = sorted({p.name or "" for p in g.per_gpu})
    clock = f"{_num(g.sm_clock_mhz_min)}–{_num(g.sm_clock_mhz_max)} MHz"
    return (
        f"GPU ×{g.count} {', '.join(names)}: util mean {_num(g.util_pct_mean)} %, max {_num(g.util_pct_max)} %; "
        f"peak memory {_gib(g.peak_mem_used_bytes)} of {_gib(g.peak_mem_total_bytes)} GiB; "
        f"max {_num(g.temp_c_max)} °C; power mean {_num(g.power_w_mean)} W, max {_num(g.power_w_max)} W; "
        f"SM clock {clock}"
    )


def _system_summary(r: Resources) -> str:
    s = r.system
    if s is None:
        return f"system: none — {_why_missing(r, 'system')}"
    rss = s.proc_peak_rss_bytes
    return (
        f"system: CPU mean {_num(s.cpu_pct_mean)} %, max {_num(s.cpu_pct_max)} %; "
        f"memory peak {_gib(s.peak_mem_used_bytes)} of {_gib(s.mem_total_bytes)} GiB; "
        f"network ↓{_rate(s.net_rx_bytes_per_s_mean)} ↑{_rate(s.net_tx_bytes_per_s_mean)} mean; "
        f"client process {_num(s.proc_cpu_pct_mean)} % of a core (max {_num(s.proc_cpu_pct_max)} %), "
        f"peak RSS {_num(None if rss is None else rss / MIB)} MiB"
    )


def _server_summary(r: Resources) -> str:
    s = r.server
    if s is None:
        why = _why_missing(r, "server")
        return "" if why == "off" else f"server: none — {why}"
    kv = s.kv_cache_usage_max
    return (
        f"server ({s.engine}): running max {_num(s.running_max, 'g')}, waiting max {_num(s.waiting_max, 'g')}, "
        f"KV cache max {_num(None if kv is None else kv * 100)} %; "
        f"its TTFT mean {_num(s.ttft_mean_ms, '.1f', ' ms')}, TPOT mean {_num(s.tpot_mean_ms, '.1f', ' ms')}"
    )
