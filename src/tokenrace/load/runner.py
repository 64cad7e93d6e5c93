"""Load generation: a cold request, warm-up, then closed-loop (exactly N in flight) or open-loop
(requests leave on a schedule, whatever the server does) measurement.

The runner knows nothing about HTTP: it calls `send(prompt, record)` and hands every finished
record to `finish(record, prompt)`. It records the windows that throughput figures need.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from tokenrace.client.openai import Prompt
from tokenrace.client.records import RequestRecord
from tokenrace.errors import UsageError
from tokenrace.figures.summary import Windows
from tokenrace.load.arrivals import schedule
from tokenrace.load.prompts import PromptSet

perf_ns = time.perf_counter_ns
Send = Callable[[Prompt, RequestRecord], Awaitable[RequestRecord]]
Finish = Callable[[RequestRecord, Prompt], Awaitable[None]]


@dataclass(slots=True)
class Load:
    concurrency: int = 1
    rate: float | None = None  # requests/s; set = open loop
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None  # open loop cap
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    cold: bool = True
    seed: int | None = 0
    keep_awake: bool = True  # see keep_awake() below

    def validate(self) -> None:
        if self.requests is None and self.duration_s is None:
            raise UsageError("say how much to run: --requests N and/or --duration S")
        if self.requests is not None and self.requests < 1:
            raise UsageError("--requests must be at least 1")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UsageError("--max-concurrency must be at least 1")
        if self.warmup < 0:
            raise UsageError("--warmup cannot be negative")


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector from pausing every stream at once mid-run.

    Objects alive at the start are frozen out of collection, and young collections run 50 times
    less often; the thresholds are restored afterwards. Memory stays bounded: collection still runs.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], 1) * 50, old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


async def keep_awake(period_s: float = 0.0002) -> None:
    """Wake the event loop every 200 µs while a run lasts.

    On a virtual machine an idle vCPU halts, and waking it for an arriving packet took ~0.3 ms at
    p50 here: that delay landed in the first chunk's timestamp after each quiet TTFT wait (measured
    with benchmarks/client_accuracy.py: TTFT bias p50 0.29 -> 0.03 ms, p99 3.7 -> 2.2 ms). The cost
    is a few per cent of one core.
    """
    while True:
        await asyncio.sleep(period_s)


async def sleep_until(t_ns: int) -> None:
    """Sleep to an absolute perf_counter_ns deadline; the last half millisecond by yielding."""
    while True:
        left = t_ns - perf_ns()
        if left <= 0:
            return
        await asyncio.sleep((left - 500_000) / 1e9 if left > 1_000_000 else 0)


class Runner:
    def __init__(self, send: Send, prompts: PromptSet, load: Load, finish: Finish) -> None:
        load.validate()
        self.send = send
        self.prompts = prompts
        self.load = load
        self.finish = finish
        self.records: list[RequestRecord] = []
        self.windows = Windows()
        self._seq = 0
        self._in_flight = 0
        self._measuring = False
        self._taken = 0
        self._deadline_ns: int | None = None

    async def run(self) -> list[RequestRecord]:
        with quiet_gc():
            ticker = asyncio.create_task(keep_awake()) if self.load.keep_awake else None
            try:
                await self._run()
            finally:
                if ticker is not None:
                    ticker.cancel()
        return self.records

    async def _run(self) -> None:
        if self.load.cold:
            await self._one("cold")
        if self.load.warmup:
            await self._closed("warmup", min(self.load.concurrency, self.load.warmup), self.load.warmup, None)
        self._measuring = True
        if self.load.rate is not None:
            await self._open()
        else:
            await self._closed("measure", self.load.concurrency, self.load.requests, self.load.duration_s)

    async def _one(self, phase: str, intended_ns: int | None = None) -> None:
        seq = self._seq
        self._seq += 1
        prompt = self.prompts.pick(seq)
        rec = RequestRecord(seq=seq, phase=phase, intended_start_ns=intended_ns)
        self._in_flight += 1
        if self._measuring:
            self.windows.max_in_flight = max(self.windows.max_in_flight, self._in_flight)
            if self._in_flight >= self.load.concurrency and self.windows.steady_start_ns is None:
                self.windows.steady_start_ns = perf_ns()
        try:
            await self.send(prompt, rec)
        finally:
            self._in_flight -= 1
            self.records.append(rec)
        await self.finish(rec, prompt)

    async def _closed(self, phase: str, workers: int, count: int | None, duration_s: float | None) -> None:
        self._taken = 0
        self._deadline_ns = perf_ns() + int(duration_s * 1e9) if duration_s else None

        async def worker() -> None:
            while self._take(count):
                await self._one(phase)
            if phase == "measure" and self.windows.steady_end_ns is None:
                self.windows.steady_end_ns = perf_ns()

        await _gather_or_cancel([worker() for _ in range(workers)])

    def _take(self, count: int | None) -> bool:
        if count is not None and self._taken >= count:
            return False
        if self._deadline_ns is not None and perf_ns() >= self._deadline_ns:
            return False
        self._taken += 1
        return True

    async def _open(self) -> None:
        load = self.load
        assert load.rate is not None
        offsets = schedule(
            load.rate,
            load.arrival,
            count=load.requests,
            duration_s=load.duration_s,
            burstiness=load.burstiness,
            seed=load.seed,
        )
        self.windows.offered_rate = load.rate
        cap = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
        tasks: set[asyncio.Task[None]] = set()
        base = perf_ns()
        self.windows.steady_start_ns = base
        try:
            for off in offsets:
                intended = base + int(off * 1e9)
                await sleep_until(intended)
                if cap is not None:
                    await cap.acquire()
                task = asyncio.create_task(self._capped(intended, cap))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            self.windows.steady_end_ns = perf_ns()
            if tasks:
                await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _capped(self, intended_ns: int, cap: asyncio.Semaphore | None) -> None:
        try:
            await self._one("measure", intended_ns)
        finally:
            if cap is not None:
                cap.release()


async def _gather_or_cancel(coros: list[Awaitable[None]]) -> None:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
