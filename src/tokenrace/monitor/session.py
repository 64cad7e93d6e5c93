"""MonitorSession: sample GPUs, this machine and the server's /metrics in the background.

One asyncio task ticks every `interval_s` (on a fixed schedule; a slow tick skips the ticks it
overran rather than bunching them). NVML and psutil calls, JSON encoding and the file write run in
one dedicated worker thread, and /metrics is fetched with aiohttp and parsed in that thread, so
the event loop that runs the benchmark is never held up for more than a few microseconds.

Failure policy (a monitor failure never stops a benchmark):
- a sampler that cannot work here (no GPU, no /metrics) is `unavailable`, said once in `notices`;
- a sampler whose sample raises is `failed` and disabled at once (GPU, system), or after
  SERVER_MAX_CONSECUTIVE failed scrapes in a row (a busy server may miss one scrape);
- `start()` and `stop()` never raise; errors are counted in the summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson
from pydantic import ValidationError

from tokenrace.engines import WITH_METRICS
from tokenrace.model.files import TIMESERIES, read_jsonl
from tokenrace.model.monitor import GpuSample, Resources, SamplerStatus, ServerSample, SystemSample, TimeseriesLine
from tokenrace.monitor.aggregate import Aggregator
from tokenrace.monitor.gpu import GpuSampler, SamplerUnavailable
from tokenrace.monitor.server import MetricsScraper, ScrapeFailed, first_histogram_mean_delta
from tokenrace.monitor.system import SystemSampler

SERVER_MAX_CONSECUTIVE = 3
CLOSE_TIMEOUT_S = 5.0
T = TypeVar("T")
SampleCallback = Callable[[TimeseriesLine], None]


@dataclass(slots=True)
class SamplerState:
    name: str
    status: str = "ok"  # ok | unavailable (never worked here) | failed (disabled after errors) | off
    reason: str | None = None
    errors: int = 0
    consecutive: int = 0
    max_consecutive: int = 1
    samples: int = 0  # samples it produced; one that never worked is "unavailable", not "failed"

    @property
    def active(self) -> bool:
        return self.status == "ok"

    def as_status(self) -> SamplerStatus:
        return SamplerStatus(status=self.status, reason=self.reason, errors=self.errors)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class MonitorSession:
    def __init__(
        self,
        directory: Path,
        interval_s: float = 1.0,
        metrics_url: str | None = None,
        nvml: Any = None,
        *,
        gpu: bool = True,
        system: bool = True,
        metrics_headers: dict[str, str] | None = None,
        t0_ns: int | None = None,
        on_sample: SampleCallback | None = None,
        local_server: bool | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.directory = Path(directory)
        self.interval_s = float(interval_s)
        self.metrics_url = metrics_url
        self.t0_ns = t0_ns  # t_ms offsets count from here (the bench run's t0 aligns them with records)
        self.on_sample = on_sample
        self.local_server = local_server
        self.notices: list[str] = []  # one line per sampler that is unavailable or failed
        self.result: Resources | None = None
        self._gpu = GpuSampler(nvml) if gpu else None
        self._system = SystemSampler() if system else None
        self._scraper = (
            MetricsScraper(metrics_url, min(max(self.interval_s, 1.0), 5.0), metrics_headers) if metrics_url else None
        )
        self._states = {
            "gpu": SamplerState("gpu", "ok" if gpu else "off"),
            "system": SamplerState("system", "ok" if system else "off"),
            "server": SamplerState("server", "ok" if metrics_url else "off", max_consecutive=SERVER_MAX_CONSECUTIVE),
        }
        self._agg = Aggregator()
        self._file: IO[bytes] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._started_mono = 0.0
        self._started_wall: str | None = None
        self._write_errors = 0
        self._tick_errors = 0

    @property
    def path(self) -> Path:
        return self.directory / TIMESERIES

    @property
    def samples(self) -> int:
        """Samples taken so far."""
        return self._agg.samples

    @property
    def samplers(self) -> dict[str, SamplerStatus]:
        return {name: s.as_status() for name, s in self._states.items()}

    async def __aenter__(self) -> MonitorSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- start / stop ------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the samplers and begin sampling in the background. Never raises."""
        self._started_mono = time.monotonic()
        self._started_wall = datetime.now(UTC).isoformat(timespec="milliseconds")
        if self.t0_ns is None:
            self.t0_ns = time.perf_counter_ns()
        try:
            self._file = await asyncio.to_thread(self._open_file)
        except OSError as exc:
            for state in self._states.values():
                if state.active:
                    state.errors += 1
                    self._disable(state, "failed", f"cannot write {self.path}: {exc.strerror}")
            return
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenrace-monitor")
        await asyncio.gather(self._open("gpu", self._gpu), self._open("system", self._system), self._open_scraper())
        self._task = asyncio.create_task(self._loop(), name="tokenrace-monitor")

    def _open_file(self) -> IO[bytes]:
        self.directory.mkdir(parents=True, exist_ok=True)
        return open(self.path, "ab")  # closed by stop()

    async def stop(self) -> Resources:
        """Stop sampling, close everything and return the resource summary. Never raises."""
        if self.result is not None:
            return self.result
        try:
            if self._task is not None:
                self._task.cancel()
                await asyncio.wait([self._task])  # wait() never raises the task's CancelledError
                if not self._task.cancelled() and self._task.exception() is not None:
                    self.notices.append(f"monitor: sampling stopped ({_reason(self._task.exception())})")  # type: ignore[arg-type]
            await self._close_all()
        except Exception as exc:  # noqa: BLE001 - the summary is still worth returning
            self.notices.append(f"monitor: closing failed ({_reason(exc)})")
        try:
            self.result = self._summary()
        except Exception as exc:  # noqa: BLE001 - a bare summary rather than an exception
            self.notices.append(f"monitor: summary failed ({_reason(exc)})")
            self.result = Resources(
                interval_s=self.interval_s,
                samples=self._agg.samples,
                timeseries=TIMESERIES,
                local_server=self.local_server,
                samplers=self.samplers,
                errors=1,
                notices=list(self.notices),
            )
        return self.result

    async def _open(self, name: str, sampler: GpuSampler | SystemSampler | None) -> None:
        state = self._states[name]
        if sampler is None or not state.active:
            return
        try:
            await self._offload(sampler.open)
        except SamplerUnavailable as exc:
            self._disable(state, "unavailable", str(exc))
        except Exception as exc:  # noqa: BLE001
            self._disable(state, "unavailable", _reason(exc))

    async def _open_scraper(self) -> None:
        if self._scraper is not None:
            try:
                await self._scraper.open()
            except Exception as exc:  # noqa: BLE001
                self._disable(self._states["server"], "unavailable", _reason(exc))

    async def _close_all(self) -> None:
        if self._scraper is not None:
            with contextlib.suppress(Exception):
                await self._scraper.close()
        # Through the worker, queued behind any sample or write still running there, so nothing is
        # closed under it; bounded, so a wedged driver cannot hold up the end of a run.
        closers = [c.close for c in (self._gpu, self._system) if c is not None]
        if self._file is not None:
            closers.append(self._file.close)
        for close in closers:
            with contextlib.suppress(Exception):
                if self._pool is not None:
                    await asyncio.wait_for(self._offload(close), CLOSE_TIMEOUT_S)
                else:
                    close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._file = None

    # ---- sampling ----------------------------------------------------------------------------

    async def _offload(self, fn: Callable[[], T]) -> T:
        assert self._pool is not None
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def _loop(self) -> None:
        # The first sample comes one interval in: CPU and network rates need a span to cover.
        next_at = self._started_mono + self.interval_s  # on a grid from start(), so t_ms ≈ k × interval
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            try:
                await self._tick()
            except Exception as exc:  # noqa: BLE001 - a bug in one tick must not end the monitor
                self._tick_errors += 1
                if self._tick_errors == 1:
                    self.notices.append(f"monitor: a sample failed ({_reason(exc)})")
            now = time.monotonic()
            next_at += self.interval_s
            while next_at <= now:  # overran: skip the missed ticks rather than bunch them up
                next_at += self.interval_s

    async def _tick(self) -> None:
        t_ns = time.perf_counter_ns()
        t_ms = round((t_ns - (self.t0_ns or t_ns)) / 1e6, 3)
        wall = datetime.now(UTC).isoformat(timespec="milliseconds")
        gpu, system, server = await asyncio.gather(self._sample_gpu(), self._sample_system(), self._scrape())
        sample = TimeseriesLine(t_ms=t_ms, wall=wall, gpu=gpu, system=system, server=server)
        self._agg.add(sample)
        # Shown before the write is awaited: a stop() that cancels this tick during the write (the
        # sample counted, its line still queued) must not leave a counted sample without its live line.
        if self.on_sample is not None:
            try:
                self.on_sample(sample)
            except Exception as exc:  # noqa: BLE001 - a display bug must not stop sampling
                self.on_sample = None
                self.notices.append(f"monitor: live display stopped ({_reason(exc)})")
        await self._write(sample)

    async def _sample_gpu(self) -> list[GpuSample] | None:
        return await self._guarded("gpu", self._gpu.sample if self._gpu else None)

    async def _sample_system(self) -> SystemSample | None:
        return await self._guarded("system", self._system.sample if self._system else None)

    async def _guarded(self, name: str, fn: Callable[[], T] | None) -> T | None:
        state = self._states[name]
        if fn is None or not state.active:
            return None
        return await self._attempt(state, lambda: self._offload(fn))

    async def _scrape(self) -> ServerSample | None:
        state = self._states["server"]
        scraper = self._scraper
        if scraper is None or not state.active:
            return None

        async def once() -> ServerSample:
            text, at_s, ms = await scraper.fetch()
            return await self._offload(lambda: scraper.parse(text, at_s, ms))

        return await self._attempt(state, once)

    async def _attempt(self, state: SamplerState, call: Callable[[], Awaitable[T]]) -> T | None:
        try:
            value = await call()
        except SamplerUnavailable as exc:
            state.errors += 1
            self._disable(state, "failed" if state.samples else "unavailable", str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - any sampler bug is contained here
            state.errors += 1
            state.consecutive += 1
            if state.consecutive >= state.max_consecutive:
                reason = str(exc) if isinstance(exc, ScrapeFailed) else _reason(exc)
                self._disable(state, "failed" if state.samples else "unavailable", reason)
            return None
        state.consecutive = 0
        state.samples += 1
        return value

    def _disable(self, state: SamplerState, status: str, reason: str) -> None:
        state.status, state.reason = status, reason
        word = "unavailable" if status == "unavailable" else f"stopped after {state.errors} error(s)"
        self.notices.append(f"monitor: {state.name} sampler {word}: {reason}")

    async def _write(self, sample: TimeseriesLine) -> None:
        f = self._file
        if f is None:
            return

        def write() -> None:
            f.write(orjson.dumps(sample.model_dump()) + b"\n")
            f.flush()

        assert self._pool is not None
        # Submitted now and shielded: a stop() that cancels this tick must not cancel a write still
        # queued in the worker (the sample is counted already), and the file's close queues after it.
        job = asyncio.get_running_loop().run_in_executor(self._pool, write)
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            job.add_done_callback(self._count_write_error)
            raise
        except Exception:  # noqa: BLE001 - a full disk loses lines, not the run
            self._write_errors += 1

    def _count_write_error(self, job: asyncio.Future[None]) -> None:
        if not job.cancelled() and job.exception() is not None:
            self._write_errors += 1

    # ---- summary -----------------------------------------------------------------------------

    def server_metrics_texts(self) -> tuple[str | None, str | None, str | None]:
        """(engine, first /metrics text, last text): for bench's server_vs_client
        (`server_clock.from_metrics_delta(engine, first, last, ...)`)."""
        s = self._scraper
        return (s.engine, s.first_text, s.last_text) if s else (None, None, None)

    def _summary(self) -> Resources:
        server = self._agg.server.summary()
        if server is not None:
            server.ttft_mean_ms, server.tpot_mean_ms = self._server_means()
        errors = sum(s.errors for s in self._states.values()) + self._write_errors + self._tick_errors
        return Resources(
            interval_s=self.interval_s,
            samples=self._agg.samples,
            started_at=self._started_wall,
            duration_s=round(time.monotonic() - self._started_mono, 3) if self._started_wall else None,
            timeseries=TIMESERIES,
            local_server=self.local_server,
            gpu=self._agg.gpu(),
            system=self._agg.system.summary(),
            server=server,
            samplers=self.samplers,
            errors=errors,
            write_errors=self._write_errors,
            notices=list(self.notices),
        )

    def _server_means(self) -> tuple[float | None, float | None]:
        """The engine's mean TTFT and TPOT (ms) over the monitored span, from its histograms."""
        engine, first, last = self.server_metrics_texts()
        if not engine or not first or not last or first is last:
            return None, None
        hist = WITH_METRICS[engine].histograms
        ttft, tpot = (_mean_ms(first, last, hist.get(key, ())) for key in ("ttft_s", "tpot_s"))
        return ttft, tpot


def _mean_ms(first: str, last: str, histograms: tuple[str, ...]) -> float | None:
    mean_s = first_histogram_mean_delta(first, last, histograms)
    return None if mean_s is None else round(mean_s * 1000.0, 4)


def load_timeseries(directory: Path) -> list[TimeseriesLine]:
    """The samples in `directory/timeseries.jsonl` (none when there is no such file); a line cut by
    a crash, or one that is not a sample, is skipped."""
    path = Path(directory) / TIMESERIES
    out = []
    for line in read_jsonl(path) if path.is_file() else []:
        try:
            out.append(TimeseriesLine.model_validate(line))
        except ValidationError:
            continue
    return out
