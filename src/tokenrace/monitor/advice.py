"""Resource warnings: what the resource figures say about where the bottleneck was.

`resource_warnings(resources, run_summary)` reads the monitor's `Resources` (MonitorSession.stop()) and,
when given, the bench summary (`metrics.e2e_ms`, `throughput`). Each warning is a `RunWarning`
(code `resources.*`): one plain sentence, and the numbers that triggered it as its figures.
Thresholds are constants here and listed in docs/monitor.md.
"""

from __future__ import annotations

from tokenrace.model.monitor import GpuResources, Resources, SamplerStatus, ServerResources, SystemResources
from tokenrace.model.summary import RunWarning, Summary, WarningCode
from tokenrace.monitor.gpu import THERMAL_REASONS

GPU_BUSY_PCT = 90.0  # mean GPU utilisation at which the GPU is the bottleneck
GPU_IDLE_PCT = 30.0  # mean GPU utilisation under which the GPU is not the bottleneck
LATENCY_SPREAD = 1.5  # E2E p95 / p50 above which requests are queueing, not just varying
CLIENT_CPU_PCT = 85.0  # mean CPU of the client process, % of one core (its event loop is one thread)
SYSTEM_CPU_PCT = 90.0  # mean CPU of the whole machine, % of all cores
SYSTEM_MEM_FRACTION = 0.95
KV_FULL_FRACTION = 0.95
GPU_HOT_C = 85.0


def resource_warnings(resources: Resources | None, run_summary: Summary | None = None) -> list[RunWarning]:
    if resources is None:
        return []
    run = run_summary or Summary()
    gpu = resources.gpu if resources.local_server is not False else None
    out: list[RunWarning] = []
    for check in (_saturated, _server_queue, _gpu_idle, _kv_full, _preempted, _hot):
        found = check(gpu, resources.server, run)
        if found:
            out.append(found)
    out += _client(resources.system)
    out += _sampler_failures(resources.samplers)
    return out


def _warning(code: WarningCode, message: str, **figures: float | int | str | None) -> RunWarning:
    return RunWarning(code=code, message=message, figures=figures)


def _spread(run: Summary) -> float | None:
    p50, p95 = run.metrics.e2e_ms.p50, run.metrics.e2e_ms.p95
    return p95 / p50 if p50 and p95 is not None else None


def _util(gpu: GpuResources | None) -> float | None:
    return gpu.util_pct_mean if gpu is not None else None


def _busy(gpu: GpuResources | None) -> bool:
    return (_util(gpu) or 0.0) >= GPU_BUSY_PCT


def _saturated(gpu: GpuResources | None, server: ServerResources | None, run: Summary) -> RunWarning | None:
    mean = _util(gpu)
    if mean is None or mean < GPU_BUSY_PCT:
        return None
    spread = _spread(run)
    queued = (server.waiting_max if server is not None else None) or 0
    if not queued and (spread is None or spread < LATENCY_SPREAD):
        return None
    why = []
    if spread is not None and spread >= LATENCY_SPREAD:
        why.append(f"p95 E2E was {spread:.1f}× p50")
    if queued:
        why.append(f"the server queued up to {queued:g} requests")
    return _warning(
        "resources.gpu_saturated",
        f"GPU at {mean:.0f} % (mean) while {' and '.join(why)}: the backend is saturated; "
        "more concurrency only adds queueing",
        gpu_util_pct_mean=mean,
        e2e_p95_over_p50=None if spread is None else round(spread, 4),
        server_waiting_max=queued or None,
    )


def _server_queue(gpu: GpuResources | None, server: ServerResources | None, run: Summary) -> RunWarning | None:
    if server is None or not server.waiting_max or _busy(gpu):
        return None
    running = server.running_max
    cap = f" while running at most {running:g}" if running is not None else ""
    mean = _util(gpu)
    gpu_note = f" with the GPU at {mean:.0f} %" if mean is not None else ""
    return _warning(
        "resources.server_queue",
        f"the server queued up to {server.waiting_max:g} requests{cap}{gpu_note}: its batch or slot limit "
        "caps concurrency; requests beyond it only wait (latency includes time in the server's queue)",
        server_waiting_max=server.waiting_max,
        server_running_max=running,
        gpu_util_pct_mean=mean,
    )


def _gpu_idle(gpu: GpuResources | None, server: ServerResources | None, run: Summary) -> RunWarning | None:
    mean = _util(gpu)
    if gpu is None or mean is None or mean >= GPU_IDLE_PCT or not run.throughput.output_tokens_per_s:
        return None
    top = gpu.util_pct_max
    return _warning(
        "resources.gpu_idle",
        f"GPU utilisation averaged {mean:.0f} % (max {_pct(top)} %): the GPU was not the bottleneck; "
        "look at the client, the network, or raise concurrency",
        gpu_util_pct_mean=mean,
        gpu_util_pct_max=top,
    )


def _kv_full(gpu: GpuResources | None, server: ServerResources | None, run: Summary) -> RunWarning | None:
    kv = server.kv_cache_usage_max if server is not None else None
    if kv is None or kv < KV_FULL_FRACTION:
        return None
    return _warning(
        "resources.kv_cache_full",
        f"the KV cache was {kv * 100:.0f} % full at peak: new requests had to wait for room or preempt others",
        kv_cache_usage_max=kv,
    )


def _preempted(gpu: GpuResources | None, server: ServerResources | None, run: Summary) -> RunWarning | None:
    n = server.preemptions if server is not None else None
    if not n:
        return None
    return _warning(
        "resources.preemptions",
        f"the server preempted {n} requests (KV cache exhausted): their latency includes recomputation; "
        "lower the concurrency or give the KV cache more memory",
        preemptions=n,
    )


def _hot(gpu: GpuResources | None, server: ServerResources | None, run: Summary) -> RunWarning | None:
    if gpu is None:
        return None
    thermal = sum(n for r, n in gpu.throttle_samples.items() if r in THERMAL_REASONS)
    temp = gpu.temp_c_max
    if not thermal and (temp is None or temp < GPU_HOT_C):
        return None
    seen = f" with thermal slowdown in {thermal} GPU samples" if thermal else ""
    reached = f"reached {temp:.0f} °C" if temp is not None else "ran hot"
    return _warning(
        "resources.gpu_hot",
        f"the GPU {reached}{seen}: clocks drop when it is hot, so a longer run may not hold this speed",
        gpu_temp_c_max=temp,
        thermal_throttle_samples=thermal,
    )


def _client(system: SystemResources | None) -> list[RunWarning]:
    if system is None:
        return []
    out = []
    proc = system.proc_cpu_pct_mean
    if proc is not None and proc >= CLIENT_CPU_PCT:
        out.append(
            _warning(
                "resources.client_cpu",
                f"the client's CPU was at {proc:.0f} % of a core (mean; max {_pct(system.proc_cpu_pct_max)} %): "
                "the numbers may be bounded by the client",
                proc_cpu_pct_mean=proc,
                proc_cpu_pct_max=system.proc_cpu_pct_max,
            )
        )
    cpu = system.cpu_pct_mean
    if cpu is not None and cpu >= SYSTEM_CPU_PCT:
        out.append(
            _warning(
                "resources.system_cpu",
                f"this machine's CPU was at {cpu:.0f} % (mean, all cores): the client competes for it with "
                "everything else here, the server too when it runs here",
                cpu_pct_mean=cpu,
            )
        )
    used, total = system.peak_mem_used_bytes, system.mem_total_bytes
    if used and total and used / total >= SYSTEM_MEM_FRACTION:
        out.append(
            _warning(
                "resources.system_memory",
                f"system memory peaked at {used / 2**30:.1f} of {total / 2**30:.1f} GiB: swapping or the OOM "
                "killer would distort latency",
                peak_mem_used_bytes=used,
                mem_total_bytes=total,
            )
        )
    return out


def _sampler_failures(samplers: dict[str, SamplerStatus]) -> list[RunWarning]:
    return [
        _warning(
            "resources.sampler_failed",
            f"monitor: the {name} sampler stopped after {s.errors} errors ({s.reason}); its figures end there",
            sampler=name,
            errors=s.errors,
        )
        for name, s in samplers.items()
        if s.status == "failed"
    ]


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f}"
