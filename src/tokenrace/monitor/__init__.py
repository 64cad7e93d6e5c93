"""Resource monitoring: GPU (NVML), this machine (psutil) and the server's Prometheus /metrics.

A speed number without resource figures hides the bottleneck. The monitor samples at a fixed
interval (1 s by default) into `timeseries.jsonl` and sums the samples up when it stops.

API
---

``MonitorSession(directory, interval_s=1.0, metrics_url=None, nvml=None, *, gpu=True, system=True,
metrics_headers=None, t0_ns=None, on_sample=None, local_server=None)``

- ``await start()``: opens the samplers and samples in a background asyncio task. NVML/psutil
  calls, JSON encoding and file writes run in one dedicated worker thread; /metrics is fetched
  with aiohttp (its own one-connection pool) and parsed in that thread. Never raises.
- ``await stop() -> Resources``: the resource summary (below). Never raises; idempotent.
- ``notices``: one line per sampler that is unavailable here or failed (e.g.
  ``monitor: gpu sampler unavailable: no NVIDIA GPU / NVML unavailable (...)``), said once.
- ``server_metrics_texts() -> (engine, first_text, last_text)``: the first and last /metrics
  texts, for ``bench.server_clock.from_metrics_delta`` (server_vs_client for vLLM/SGLang).
- ``nvml``: the NVML module to use (default: ``import pynvml``); tests pass a fake module.
- ``t0_ns``: a ``time.perf_counter_ns()`` origin for ``t_ms``; pass the bench run's t0 so that
  samples line up with ``records.jsonl``'s ``start_ms``. Default: the moment ``start()`` ran.
- ``on_sample(sample: TimeseriesLine)``: called on the event loop after each sample is written (live display).
- ``local_server``: False when the server runs on another machine; the GPU figures then describe
  this machine, and the GPU-based warnings are left out. ``is_local_url(url)`` decides it.
- An async context manager too (``async with MonitorSession(...) as m:``; ``m.result`` after).

One line of ``timeseries.jsonl`` per sample, a ``TimeseriesLine`` (every figure None when its
sampler is off or failed); the models are in ``tokenrace.model.monitor``::

    {"t_ms": 1000.4, "wall": "2025-01-01T12:00:01.000+00:00",
     "gpu": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "util_pct": 97.0,
              "mem_used_bytes": 76235669504, "mem_total_bytes": 85520809984, "temp_c": 66.0,
              "power_w": 612.4, "power_limit_w": 700.0, "sm_clock_mhz": 1980.0, "throttle": []}],
     "system": {"cpu_pct": 31.5, "mem_used_bytes": 40532451328, "mem_total_bytes": 270123335680,
                "net_rx_bytes_per_s": 1203345.2, "net_tx_bytes_per_s": 310230.1,
                "proc_cpu_pct": 42.0, "proc_rss_bytes": 183500800},
     "server": {"engine": "vllm", "running": 12, "waiting": 3, "kv_cache_usage": 0.41,
                "prompt_tokens_per_s": 5120.3, "generation_tokens_per_s": 1480.2,
                "preemptions_total": 0, "ttft_mean_ms": 138.9, "tpot_mean_ms": 21.7, "scrape_ms": 3.1}}

``resource_warnings(resources, run_summary=None) -> list[RunWarning]``: plain-language warnings
(each with a code and its figures) from the summary above and the bench `Summary`
(``metrics.e2e_ms``, ``throughput``), e.g. "GPU at 98 %
(mean) while p95 E2E was 2.3× p50: the backend is saturated; more concurrency only adds queueing".

``load_timeseries(directory) -> list[TimeseriesLine]``; ``metrics_url_for(base_url)``:
``http://h:p/v1`` -> ``http://h:p/metrics``; ``is_local_url(url)``.

A bench run wires the monitor in through ``tokenrace.runs.instruments.monitor_for_bench``; the
summary builder (``tokenrace.runs.summary``) takes its resources and samples as context.

Soak drift itself is ``tokenrace.figures.drift.drift(records, timeseries, window_s=None)``.

The pieces: ``GpuSampler(nvml)`` (gpu.py), ``SystemSampler()`` (system.py),
``MetricsScraper(url)`` with ``parse_metrics``/``normalize`` (server.py), ``Aggregator``
(aggregate.py). Every figure is defined in docs/monitor.md.
"""

from __future__ import annotations

from tokenrace.monitor.advice import resource_warnings
from tokenrace.monitor.gpu import GpuSampler, SamplerUnavailable
from tokenrace.monitor.server import MetricsScraper, is_local_url, metrics_url_for
from tokenrace.monitor.session import MonitorSession, load_timeseries
from tokenrace.monitor.system import SystemSampler

__all__ = [
    "GpuSampler",
    "MetricsScraper",
    "MonitorSession",
    "SamplerUnavailable",
    "SystemSampler",
    "is_local_url",
    "load_timeseries",
    "metrics_url_for",
    "resource_warnings",
]
