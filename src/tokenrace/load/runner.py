"""Load generation: a cold request, warm-up, then closed-loop (exactly N in flight) or open-loop
(requests leave on a schedule, whatever the server does) measurement.

The runner knows nothing about HTTP: it calls `send(prompt, record)` and hands every finished
record to `finish(record, prompt)`. It records the windows that throughput figures need.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import numpy as np

from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput
from tokenrace.load.arrivals import check_arrivals, schedule
from tokenrace.load.prompts import PromptSet
from tokenrace.load.saturation import Detector, SaturationRule, Tick
from tokenrace.load.shapes import Stage, StagesKind, concurrency_plan, ramp_offsets, stage_offsets
from tokenrace.load.windows import Windows
from tokenrace.load.workload import Prompts, Sessions, TraceLoad, Workload
from tokenrace.model.records import Phase, RequestRecord

perf_ns = time.perf_counter_ns
# A probe: what a new user sends beside the load - a short prompt and one output token.
PROBE_PROMPT = Prompt(messages=[{"role": "user", "content": "Reply with one word: ready?"}], max_tokens=1)
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
    keep_awake: bool = False  # see keep_awake() below
    ramp_s: float | None = None  # open loop: the rate rises linearly from 0 to `rate` over this
    stages: tuple[Stage, ...] | None = None  # piecewise rate (open loop) or concurrency (closed loop)
    stages_kind: StagesKind = "rate"
    cancel_rate: float = 0.0  # share of measured requests the client cancels mid-stream
    probe_rate: float | None = None  # light requests/s beside the measured load (phase "probe")
    saturation_stop: bool = True  # open loop: stop early once the server is over-saturated

    def validate(self, finite: bool = False) -> None:
        """`finite`: the workload ends by itself (a trace, a file of sessions)."""
        if self.requests is None and self.duration_s is None and not finite and self.stages is None:
            raise InvalidInput("requests", "say how much to run: a request count and/or a duration")
        if self.requests is not None and self.requests < 1:
            raise InvalidInput("requests", "must be at least 1")
        if self.concurrency < 1:
            raise InvalidInput("concurrency", "must be at least 1")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise InvalidInput("max_concurrency", "must be at least 1")
        if self.warmup < 0:
            raise InvalidInput("warmup", "cannot be negative")
        if not 0.0 <= self.cancel_rate <= 1.0:
            raise InvalidInput("cancel_rate", f"must be a share between 0 and 1, got {self.cancel_rate}")
        if self.probe_rate is not None and not (self.probe_rate > 0 and math.isfinite(self.probe_rate)):
            raise InvalidInput("probe_rate", f"must be a positive number of requests/s, got {self.probe_rate}")
        if self.ramp_s is not None and self.rate is None:
            raise InvalidInput("ramp", "shapes an open-loop rate: give a rate too")
        if self.rate is not None:
            check_arrivals(self.rate, self.arrival, self.burstiness)


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


async def keep_awake() -> None:
    """Keep the event loop polling while a run lasts (opt-in: `--keep-awake`): a busy core.

    On a virtual machine an idle vCPU halts, and waking it for an arriving packet can take ~0.3 ms,
    which lands in the next arrival stamp. Polling keeps it awake, at the price of a whole core.
    (A sleep shorter than the loop's timer resolution is a spin anyway: uvloop's timers count whole
    milliseconds.) Off by default: measured with benchmarks/client_accuracy.py on a 2-vCPU machine
    shared with the server, the spin starved the server and the client's own work, and TTFT bias
    above a raw-socket client fell from +4.9 to +0.7 ms (p50, 8 streams) without it.
    """
    while True:
        await asyncio.sleep(0)


async def sleep_until(t_ns: int) -> None:
    """Sleep to an absolute perf_counter_ns deadline; the last half millisecond by yielding."""
    while True:
        left = t_ns - perf_ns()
        if left <= 0:
            return
        await asyncio.sleep((left - 500_000) / 1e9 if left > 1_000_000 else 0)


class Runner:
    """The one scheduler of a run. `lead_ns`: an open loop hands each send to `send` this long before
    its intended time (worker processes then send at the intended time itself); 0 in one process."""

    def __init__(
        self, send: Send, workload: Workload | PromptSet, load: Load, finish: Finish, lead_ns: int = 0
    ) -> None:
        self.lead_ns = lead_ns
        self.workload: Workload = Prompts(workload) if isinstance(workload, PromptSet) else workload
        load.validate(finite=isinstance(self.workload, Sessions | TraceLoad))
        self.send = send
        self.load = load
        self._cancel_rng = np.random.default_rng([load.seed or 0, 0xCA9C])
        self.finish = finish
        self.records: list[RequestRecord] = []
        self.windows = Windows()
        self._seq = 0
        self._in_flight = 0
        self._measuring = False
        self._taken = 0
        self._deadline_ns: int | None = None
        self.saturation_rule = SaturationRule()
        self._ended = 0  # measured requests ended so far (the over-saturation watch counts them)
        self._taken_open = 0  # open-loop sends handed out so far

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
        # Sessions and traces are their own warm-up story: each session's first turn and the trace's
        # first requests are what production sees cold, so no extra request is sent before them.
        independent = isinstance(self.workload, Prompts)
        if self.load.cold and independent:
            await self._one("cold")
        if self.load.warmup and independent:
            await self._closed("warmup", min(self.load.concurrency, self.load.warmup), self.load.warmup, None)
        self._measuring = True
        probes = asyncio.create_task(self._probes(self.load.probe_rate)) if self.load.probe_rate else None
        try:
            await self._measure()
        finally:
            if probes is not None:
                probes.cancel()
                await asyncio.gather(probes, return_exceptions=True)

    async def _measure(self) -> None:
        if isinstance(self.workload, Sessions):
            await self._sessions(self.workload)
        elif self.load.rate is not None or isinstance(self.workload, TraceLoad) or self._rate_stages():
            await self._open()
        elif self.load.stages is not None:
            await self._staged_closed(self.load.stages)
        else:
            await self._closed("measure", self.load.concurrency, self.load.requests, self.load.duration_s)

    async def _probes(self, rate: float) -> None:
        """One probe every 1/rate s from the start of the measured phase until it ends; the probes
        still in flight then are waited for (they are what a new user meets at the end of the load)."""
        start = perf_ns()
        tasks: set[asyncio.Task[None]] = set()
        k = 1
        try:
            while True:
                await sleep_until(start + int(k / rate * 1e9))
                k += 1
                task = asyncio.create_task(self._probe())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except asyncio.CancelledError:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _probe(self) -> None:
        seq = self._seq
        self._seq += 1
        rec = RequestRecord(seq=seq, phase="probe")
        try:
            await self.send(PROBE_PROMPT, rec)
        finally:
            self.records.append(rec)
        await self.finish(rec, PROBE_PROMPT)

    def _rate_stages(self) -> bool:
        return self.load.stages is not None and self.load.stages_kind == "rate"

    async def _one(
        self,
        phase: Phase,
        intended_ns: int | None = None,
        index: int | None = None,
        prompt: Prompt | None = None,
        session: tuple[str, int] | None = None,
    ) -> tuple[RequestRecord, str]:
        """Send one request; `index` picks a trace's request, `prompt` is a session turn's.
        Returns the record and the generated text (which `finish` may drop from the record)."""
        seq = self._seq
        self._seq += 1
        if prompt is None:
            w = self.workload
            prompt = w.pick(index if index is not None else seq) if not isinstance(w, Sessions) else None
        assert prompt is not None
        rec = RequestRecord(seq=seq, phase=phase, intended_start_ns=intended_ns, content=prompt.content)
        if session is not None:
            rec.session_id, rec.turn = session
        if phase == "measure" and self.load.cancel_rate > 0 and self._cancel_rng.random() < self.load.cancel_rate:
            rec.cancel_after_chunks = int(self._cancel_rng.integers(1, 9))
        self._in_flight += 1
        if self._measuring:
            self.windows.max_in_flight = max(self.windows.max_in_flight, self._in_flight)
            if self._in_flight >= self.load.concurrency and self.windows.steady_start_ns is None:
                self.windows.steady_start_ns = perf_ns()
        try:
            await self.send(prompt, rec)
        finally:
            self._in_flight -= 1
            self._ended += phase == "measure"
            self.records.append(rec)
        text = rec.text
        await self.finish(rec, prompt)
        return rec, text

    async def _sessions(self, sessions: Sessions) -> None:
        """`concurrency` sessions in flight; each runs its turns in order, the model's real answers
        kept in its history, with its think time before each later turn. A failed turn ends its
        session (the next turn would need the answer it did not get)."""
        budget = len(sessions.conversations) if self.load.requests is None else self.load.requests
        self._taken = 0
        self._deadline_ns = perf_ns() + int(self.load.duration_s * 1e9) if self.load.duration_s else None
        order = iter(range(len(sessions.conversations)))

        async def worker() -> None:
            while self._take(budget):
                index = next(order, None)
                if index is None:
                    break
                await self._session(sessions, index)
            if self.windows.steady_end_ns is None:
                self.windows.steady_end_ns = perf_ns()

        await _gather_or_cancel([worker() for _ in range(self.load.concurrency)])

    async def _session(self, sessions: Sessions, index: int) -> None:
        conversation = sessions.conversations[index]
        answers: list[str] = []
        for turn in range(1, len(conversation.turns) + 1):
            pause = conversation.think_before(turn)
            if pause > 0:
                await asyncio.sleep(pause)
            prompt = sessions.turn_prompt(index, turn, answers)
            rec, text = await self._one("measure", prompt=prompt, session=(conversation.id, turn))
            if not rec.ok:
                return
            answers.append(text)

    async def _staged_closed(self, stages: tuple[Stage, ...]) -> None:
        """Closed loop whose concurrency changes stage by stage (each stage runs for its duration)."""
        for stage in concurrency_plan(stages):
            if stage.concurrency > 0:
                await self._closed("measure", stage.concurrency, None, stage.end_s - stage.start_s)
            else:
                await asyncio.sleep(stage.end_s - stage.start_s)

    async def _closed(self, phase: Phase, workers: int, count: int | None, duration_s: float | None) -> None:
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
        """The open loop, watched for over-saturation (load/saturation.py) unless that is off."""
        if not self.load.saturation_stop or isinstance(self.workload, TraceLoad):
            await self._open_sends()  # a trace replays what was recorded, however the server copes
            return
        sending = asyncio.ensure_future(self._open_sends())
        watcher: asyncio.Task[None] | None = asyncio.create_task(self._watch(sending))
        try:
            await sending
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if self.windows.stopped is None or (this is not None and this.cancelling()):
                raise  # Ctrl-C, not the watch
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)

    async def _watch(self, sending: asyncio.Future[None]) -> None:
        """Sample the open loop; on over-saturation note why and cancel the sends (in flight too)."""
        rule = self.saturation_rule
        detector = Detector(rule)
        start = perf_ns()
        while not sending.done():
            await asyncio.sleep(rule.interval_s)
            now = perf_ns()
            ttfts = [
                ((r.first_token_ns - start) / 1e9, (r.first_token_ns - r.start_ns) / 1e6)
                for r in self.records
                if r.phase == "measure" and r.first_token_ns is not None and r.start_ns
            ]
            tick = Tick((now - start) / 1e9, self._taken_open, self._ended, self._in_flight)
            stop = detector.check(tick, ttfts)
            if stop is not None:
                self.windows.stopped = stop
                self.windows.steady_end_ns = now
                sending.cancel()
                return

    async def _open_sends(self) -> None:
        load = self.load
        offsets = self._offsets()
        self.windows.offered_rate = load.rate if load.ramp_s is None and load.stages is None else None
        trace = isinstance(self.workload, TraceLoad)
        cap = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
        tasks: set[asyncio.Task[None]] = set()
        base = perf_ns() + self.lead_ns  # the first send gets its lead too
        self.windows.steady_start_ns = base
        self._taken_open = 0
        try:
            for i, off in enumerate(offsets):
                intended = base + int(off * 1e9)
                await sleep_until(intended - self.lead_ns)
                if cap is not None:
                    await cap.acquire()
                task = asyncio.create_task(self._capped(intended, cap, i if trace else None))
                self._taken_open += 1
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            self.windows.steady_end_ns = perf_ns()
            if tasks:
                await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for t in tasks:
                if t.cancelling() == 0:  # not already cancelled by the gather above (see _gather_or_cancel)
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _offsets(self) -> list[float]:
        """The open loop's send offsets (s): the trace's, a shaped rate's (ramp, stages) or a flat rate's."""
        load, w = self.load, self.workload
        if isinstance(w, TraceLoad):
            last = len(w.offsets_s) if load.requests is None else min(load.requests, len(w.offsets_s))
            offsets = list(w.offsets_s[:last])
            return [o for o in offsets if o < load.duration_s] if load.duration_s is not None else offsets
        n, b, seed = load.requests, load.burstiness, load.seed
        if load.stages is not None and load.stages_kind == "rate":
            return stage_offsets(load.stages, load.arrival, count=n, burstiness=b, seed=seed)
        assert load.rate is not None
        if load.ramp_s is not None:
            d = load.duration_s
            return ramp_offsets(load.rate, load.ramp_s, load.arrival, count=n, duration_s=d, burstiness=b, seed=seed)
        return schedule(load.rate, load.arrival, count=n, duration_s=load.duration_s, burstiness=b, seed=seed)

    async def _capped(self, intended_ns: int, cap: asyncio.Semaphore | None, index: int | None = None) -> None:
        try:
            await self._one("measure", intended_ns, index)
        finally:
            if cap is not None:
                cap.release()


async def _gather_or_cancel(coros: list[Awaitable[None]]) -> None:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            # Once only: a cancelled gather has already cancelled its children, and a second cancel
            # would cut short a send that is collecting its own cancelled record (a worker's, say).
            if t.cancelling() == 0:
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
