"""Resource warnings: what the resource figures say about where the bottleneck was.

`resource_warnings(resources, run_summary)` reads the monitor's summary (MonitorSession.stop()) and,
when given, the bench summary (`metrics.e2e_ms`, `throughput`). Each warning is one plain sentence
with the numbers that triggered it. Thresholds are constants here and listed in docs/monitor.md.
"""

from __future__ import annotations

from typing import Any

GPU_BUSY_PCT = 90.0  # mean GPU utilisation at which the GPU is the bottleneck
GPU_IDLE_PCT = 30.0  # mean GPU utilisation under which the GPU is not the bottleneck
LATENCY_SPREAD = 1.5  # E2E p95 / p50 above which requests are queueing, not just varying
CLIENT_CPU_PCT = 85.0  # mean CPU of the client process, % of one core (its event loop is one thread)
SYSTEM_CPU_PCT = 90.0  # mean CPU of the whole machine, % of all cores
SYSTEM_MEM_FRACTION = 0.95
KV_FULL_FRACTION = 0.95
GPU_HOT_C = 85.0


def resource_warnings(resources: dict[str, Any] | None, run_summary: dict[str, Any] | None = None) -> list[str]:
    if not resources:
        return []
    run = run_summary or {}
    gpu = resources.get("gpu") if resources.get("local_server") is not False else None
    out: list[str] = []
    for check in (_saturated, _server_queue, _gpu_idle, _kv_full, _preempted, _hot):
        line = check(gpu, resources.get("server"), run)
        if line:
            out.append(line)
    out += _client(resources.get("system"))
    out += _sampler_failures(resources.get("samplers") or {})
    return out


def _spread(run: dict[str, Any]) -> float | None:
    e2e = (run.get("metrics") or {}).get("e2e_ms") or {}
    p50, p95 = e2e.get("p50"), e2e.get("p95")
    return p95 / p50 if p50 and p95 is not None else None


def _busy(gpu: dict[str, Any] | None) -> bool:
    return bool(gpu) and (gpu.get("util_pct_mean") or 0.0) >= GPU_BUSY_PCT  # type: ignore[union-attr]


def _saturated(gpu: dict[str, Any] | None, server: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    if not _busy(gpu):
        return None
    assert gpu is not None
    spread = _spread(run)
    queued = (server or {}).get("waiting_max") or 0
    if not queued and (spread is None or spread < LATENCY_SPREAD):
        return None
    why = []
    if spread is not None and spread >= LATENCY_SPREAD:
        why.append(f"p95 E2E was {spread:.1f}× p50")
    if queued:
        why.append(f"the server queued up to {queued:g} requests")
    return (
        f"GPU at {gpu['util_pct_mean']:.0f} % (mean) while {' and '.join(why)}: the backend is saturated; "
        "more concurrency only adds queueing"
    )


def _server_queue(gpu: dict[str, Any] | None, server: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    if not server or not server.get("waiting_max") or _busy(gpu):
        return None
    running = server.get("running_max")
    cap = f" while running at most {running:g}" if running is not None else ""
    gpu_note = f" with the GPU at {gpu['util_pct_mean']:.0f} %" if gpu and gpu.get("util_pct_mean") is not None else ""
    return (
        f"the server queued up to {server['waiting_max']:g} requests{cap}{gpu_note}: its batch or slot limit "
        "caps concurrency; requests beyond it only wait (latency includes time in the server's queue)"
    )


def _gpu_idle(gpu: dict[str, Any] | None, server: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    mean = (gpu or {}).get("util_pct_mean")
    if mean is None or mean >= GPU_IDLE_PCT or not (run.get("throughput") or {}).get("output_tokens_per_s"):
        return None
    return (
        f"GPU utilisation averaged {mean:.0f} % (max {gpu['util_pct_max']:.0f} %): the GPU was not the bottleneck; "  # type: ignore[index]
        "look at the client, the network, or raise concurrency"
    )


def _kv_full(gpu: dict[str, Any] | None, server: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    kv = (server or {}).get("kv_cache_usage_max")
    if kv is None or kv < KV_FULL_FRACTION:
        return None
    return f"the KV cache was {kv * 100:.0f} % full at peak: new requests had to wait for room or preempt others"


def _preempted(gpu: dict[str, Any] | None, server: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    n = (server or {}).get("preemptions")
    if not n:
        return None
    return (
        f"the server preempted {n} requests (KV cache exhausted): their latency includes recomputation; "
        "lower the concurrency or give the KV cache more memory"
    )


def _hot(gpu: dict[str, Any] | None, server: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    if not gpu:
        return None
    thermal = sum(n for r, n in (gpu.get("throttle_samples") or {}).items() if r in ("sw_thermal", "hw_thermal"))
    temp = gpu.get("temp_c_max")
    if not thermal and (temp is None or temp < GPU_HOT_C):
        return None
    seen = f" with thermal slowdown in {thermal} GPU samples" if thermal else ""
    reached = f"reached {temp:.0f} °C" if temp is not None else "ran hot"
    return f"the GPU {reached}{seen}: clocks drop when it is hot, so a longer run may not hold this speed"


def _client(system: dict[str, Any] | None) -> list[str]:
    if not system:
        return []
    out = []
    proc = system.get("proc_cpu_pct_mean")
    if proc is not None and proc >= CLIENT_CPU_PCT:
        out.append(
            f"the client's CPU was at {proc:.0f} % of a core (mean; max {system['proc_cpu_pct_max']:.0f} %): "
            "the numbers may be bounded by the client"
        )
    cpu = system.get("cpu_pct_mean")
    if cpu is not None and cpu >= SYSTEM_CPU_PCT:
        out.append(
            f"this machine's CPU was at {cpu:.0f} % (mean, all cores): the client competes for it with everything "
            "else here, the server too when it runs here"
        )
    used, total = system.get("peak_mem_used_bytes"), system.get("mem_total_bytes")
    if used and total and used / total >= SYSTEM_MEM_FRACTION:
        out.append(
            f"system memory peaked at {used / 2**30:.1f} of {total / 2**30:.1f} GiB: swapping or the OOM killer would distort latency"
        )
    return out


def _sampler_failures(samplers: dict[str, Any]) -> list[str]:
    return [
        f"monitor: the {name} sampler stopped after {s.get('errors', 0)} errors ({s.get('reason')}); its figures end there"
        for name, s in samplers.items()
        if s.get("status") == "failed"
    ]
