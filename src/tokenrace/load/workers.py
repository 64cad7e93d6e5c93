"""The load's sends spread over worker processes, with one scheduler: the parent's `Runner`.

The parent decides everything about the load, exactly as in one process: which request goes next,
when (open loop: its intended time), and how many are in flight (closed loop: C, counted over all
workers together, since the runner awaits each send). `Dispatcher.send` is the runner's `send`: it
hands each request to the live worker with the fewest in flight and awaits its record. A worker
(`worker_core.WorkerCore`) only sends. In an open loop the parent hands a request out `lead_ns`
before its intended time and the worker sends it at that absolute deadline, so the hand-over's own
latency never shifts the schedule.

Records come back one by one as their requests end and go through the runner's `finish` (written to
records.jsonl then), and the summary is computed from all of them by the same function as in one
process. A worker that dies loses only the requests it had in flight: each becomes a record with
error kind `worker_lost`, the run goes on over the workers left, and the death is reported with the
worker's index and exit status. Ctrl-C reaches the parent alone (workers ignore SIGINT): the runner
is cancelled, each worker cancels its streams and sends their records back, then the workers stop.

Pools: `ProcessPool` here (this machine), `ray_workers.RayPool` (a Ray cluster's nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import multiprocessing
import os
import pickle
import signal
import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeAlias

from tokenrace import aio
from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput, TokenraceError
from tokenrace.load.calibration import calibrated_ceiling
from tokenrace.load.clocks import ClockOffset, probe, to_parent_clock, to_worker_clock
from tokenrace.load.worker_core import Identity, WorkerConfig, WorkerCore, clock_id, identity
from tokenrace.model.manifest import WorkerInfo, WorkersInfo
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import RunWarning

perf_ns = time.perf_counter_ns

LEAD_NS = 50_000_000  # open loop: requests are handed out this long before their intended time
CANCEL_WAIT_S = 5.0  # how long a cancelled send waits for the worker's cancelled record
START_TIMEOUT_S = 120.0  # a worker has this long to import and report in (slow, shared machines)

# Filled by the parent's runner and never taken from a worker's copy of the record.
PARENT_FIELDS = frozenset(
    {"seq", "phase", "intended_start_ns", "session_id", "turn", "cancel_after_chunks", "worker", "content"}
)


class WorkerLost(Exception):
    """The worker died with this request in flight; `str()` says which worker and how."""


class WorkersLost(TokenraceError):
    """Every worker died: the run stops, keeping every record received."""

    exit_code = 1


class Link(Protocol):
    """The parent's end of one worker."""

    index: int
    identity: Identity | None
    clock: ClockOffset | None
    death: str | None  # why the worker died, once it has

    @property
    def alive(self) -> bool: ...

    def submit(
        self, job_id: int, fire_at_ns: int | None, prompt: Prompt, rec: RequestRecord
    ) -> asyncio.Future[RequestRecord]: ...

    def cancel(self, job_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class PoolSetup:
    """What the manifest says of how a pool was set up: its processes' start method, or the Ray
    cluster it runs on."""

    start_method: str | None = None
    ray_address: str | None = None


class Pool(Protocol):
    @property
    def kind(self) -> Literal["processes", "ray"]: ...

    @property
    def links(self) -> Sequence[Link]: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def describe(self) -> PoolSetup: ...


# --- the parent's send ------------------------------------------------------------------------------


class Dispatcher:
    """The runner's `send` over a pool's workers."""

    def __init__(self, pool: Pool, lead_ns: int = LEAD_NS) -> None:
        self.pool = pool
        self.lead_ns = lead_ns
        self._ids = itertools.count()
        self._load = [0] * len(pool.links)
        self._turn = 0
        self.sent = [0] * len(pool.links)
        self.lost_requests = 0

    def _pick(self) -> Link | None:
        """The live worker with the fewest requests in flight; ties go round the workers in turn."""
        links = self.pool.links
        best = None
        for k in range(len(links)):
            link = links[(self._turn + k) % len(links)]
            if link.alive and (best is None or self._load[link.index] < self._load[best.index]):
                best = link
        self._turn += 1
        return best

    async def send(self, prompt: Prompt, rec: RequestRecord) -> RequestRecord:
        link = self._pick()
        if link is None:
            raise WorkersLost(f"every worker died ({'; '.join(self.deaths())}); the records received are kept")
        rec.worker = link.index
        assert link.clock is not None
        fire_at = to_worker_clock(rec.intended_start_ns, link.clock) if self.lead_ns else None
        job_id = next(self._ids)
        handed_ns = perf_ns()
        self._load[link.index] += 1
        self.sent[link.index] += 1
        fut = link.submit(job_id, fire_at, prompt, rec)
        try:
            got = await asyncio.shield(fut)
        except asyncio.CancelledError:
            link.cancel(job_id)
            await self._take_cancelled(fut, link, rec, handed_ns)
            raise
        except WorkerLost as exc:
            self._lost(rec, handed_ns, str(exc))
            return rec
        finally:
            self._load[link.index] -= 1
        merge(rec, got, link.clock)
        return rec

    async def _take_cancelled(self, fut: asyncio.Future[RequestRecord], link: Link, rec: RequestRecord, t: int) -> None:
        """Wait (briefly) for the worker's own record of a cancelled stream, so its stamps are kept."""
        try:
            got = await asyncio.wait_for(asyncio.shield(fut), CANCEL_WAIT_S)
        except (TimeoutError, WorkerLost, asyncio.CancelledError) as exc:
            fut.cancel()
            why = str(exc) if isinstance(exc, WorkerLost) else "interrupted; the worker did not return the record"
            self._lost(rec, t, why, kind="cancelled")
            return
        merge(rec, got, link.clock)

    def _lost(self, rec: RequestRecord, handed_ns: int, why: str, kind: str = "worker_lost") -> None:
        # The request's own stamps died with the worker: only the hand-over and the loss are known.
        rec.start_ns = handed_ns
        rec.end_ns = perf_ns()
        rec.fail(kind, why)
        if kind == "worker_lost":
            self.lost_requests += 1

    def deaths(self) -> list[str]:
        return [link.death for link in self.pool.links if link.death]


def merge(rec: RequestRecord, got: RequestRecord, clock: ClockOffset | None) -> None:
    """Copy what the worker measured into the runner's record, its stamps on the parent's clock."""
    if clock is not None:
        to_parent_clock(got, clock)
    for name in RequestRecord.model_fields:
        if name not in PARENT_FIELDS:
            setattr(rec, name, getattr(got, name))


def peak_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most measured requests in flight at once, from their send and end stamps."""
    events = []
    for r in records:
        if r.phase == "measure" and r.start_ns and r.end_ns is not None:
            events.append((r.start_ns, 1))
            events.append((r.end_ns, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end at the same ns as a start comes first
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


# --- how many workers -------------------------------------------------------------------------------


def pick_workers(
    expected_chunks_per_s: float | None,
    streams: int,
    ceiling_chunks_per_s: float,
    ceiling_streams: int,
    cpus: int,
) -> int:
    """Sending processes for a load: enough that each stays under the one-process ceiling of both
    chunk rate and streams, at most one per usable CPU, at least 1. An unknown chunk rate counts
    streams alone."""
    if ceiling_chunks_per_s <= 0 or ceiling_streams < 1:
        raise ValueError("a ceiling must be positive")
    need = math.ceil(streams / ceiling_streams)
    if expected_chunks_per_s is not None and expected_chunks_per_s > 0:
        need = max(need, math.ceil(expected_chunks_per_s / ceiling_chunks_per_s))
    return max(1, min(need, max(1, cpus)))


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- worker processes on this machine --------------------------------------------------------------

_HEADER = struct.Struct("!I")

# The messages between the parent and a worker process, one pickled frame each.


@dataclass(frozen=True, slots=True)
class Hello:
    """worker -> parent, once connected: which worker, running where."""

    index: int
    who: Identity


@dataclass(frozen=True, slots=True)
class Job:
    """parent -> worker: send `prompt` at `fire_at_ns` (the worker's clock; None: now), filling `rec`."""

    job_id: int
    fire_at_ns: int | None
    prompt: Prompt
    rec: RequestRecord


@dataclass(frozen=True, slots=True)
class Done:
    """worker -> parent: the job's record."""

    job_id: int
    rec: RequestRecord


@dataclass(frozen=True, slots=True)
class Cancel:
    """parent -> worker: stop that job's request."""

    job_id: int


@dataclass(frozen=True, slots=True)
class ClockAsk:
    """parent -> worker: read your clock."""


@dataclass(frozen=True, slots=True)
class ClockReading:
    """worker -> parent: its perf_counter_ns() when asked."""

    ns: int


@dataclass(frozen=True, slots=True)
class Stop:
    """parent -> worker: finish and exit."""


Message: TypeAlias = Hello | Job | Done | Cancel | ClockAsk | ClockReading | Stop


def _frame(msg: Message) -> bytes:
    body = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


async def _read_frame(reader: asyncio.StreamReader) -> Message:
    (n,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    msg = pickle.loads(await reader.readexactly(n))
    if not isinstance(msg, Message):
        raise pickle.UnpicklingError(f"not a worker message: {type(msg).__name__}")
    return msg


def process_main(index: int, config: WorkerConfig, path: str) -> None:
    """A worker process: connect to the parent, send what it hands over, until told to stop."""
    # Ctrl-C goes to the whole process group; the parent alone decides what it stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    aio.run(_serve(index, config, path))


async def _serve(index: int, config: WorkerConfig, path: str) -> None:
    reader, writer = await asyncio.open_unix_connection(path)
    core = WorkerCore(config)
    await core.open()
    writer.write(_frame(Hello(index, identity())))
    tasks: set[asyncio.Task[None]] = set()

    async def run(job: Job) -> None:
        done = await core.job(job.job_id, job.fire_at_ns, job.prompt, job.rec)
        writer.write(_frame(Done(job.job_id, done)))

    try:
        while True:
            try:
                msg = await _read_frame(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break  # the parent is gone
            if isinstance(msg, Job):
                task = asyncio.create_task(run(msg))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif isinstance(msg, Cancel):
                core.cancel(msg.job_id)
            elif isinstance(msg, ClockAsk):
                writer.write(_frame(ClockReading(perf_ns())))
            elif isinstance(msg, Stop):
                break
    finally:
        await core.cancel_all()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        await core.close()
        writer.close()


class ProcessLink:
    """The parent's end of one worker process: frames over a Unix socket."""

    def __init__(self, index: int, process: Any) -> None:
        self.index = index
        self.process = process
        self.identity: Identity | None = None
        self.clock: ClockOffset | None = None
        self.death: str | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[RequestRecord]] = {}
        self._clock_answers: asyncio.Queue[int] = asyncio.Queue()
        self._reading: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def alive(self) -> bool:
        return self.death is None and self._writer is not None

    def attach(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, who: Identity) -> None:
        self.identity = who
        self._writer = writer
        self._reading = asyncio.create_task(self._read(reader))

    def submit(
        self, job_id: int, fire_at_ns: int | None, prompt: Prompt, rec: RequestRecord
    ) -> asyncio.Future[RequestRecord]:
        fut: asyncio.Future[RequestRecord] = asyncio.get_running_loop().create_future()
        if not self.alive:
            fut.set_exception(WorkerLost(self.death or f"worker {self.index} is not running"))
            return fut
        self._pending[job_id] = fut
        self._send(Job(job_id, fire_at_ns, prompt, rec))
        return fut

    def cancel(self, job_id: int) -> None:
        if self.alive and job_id in self._pending:
            self._send(Cancel(job_id))

    async def clock_now(self) -> int:
        self._send(ClockAsk())
        return await asyncio.wait_for(self._clock_answers.get(), START_TIMEOUT_S)

    def _send(self, msg: Message) -> None:
        assert self._writer is not None
        self._writer.write(_frame(msg))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                msg = await _read_frame(reader)
                if isinstance(msg, Done):
                    fut = self._pending.pop(msg.job_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg.rec)
                elif isinstance(msg, ClockReading):
                    self._clock_answers.put_nowait(msg.ns)
        except (asyncio.IncompleteReadError, ConnectionError, pickle.UnpicklingError, EOFError):
            pass
        await self._lose()

    async def _lose(self) -> None:
        """The connection ended: a stop we asked for, or a death to report."""
        if not self._stopping:
            self.death = f"worker {self.index} (pid {self.process.pid}) died: {await _exit_status(self.process)}"
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(WorkerLost(self.death or f"worker {self.index} stopped"))
        self._pending.clear()
        self._writer = None

    async def stop(self) -> None:
        self._stopping = True
        if self._writer is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self._send(Stop())
                await self._writer.drain()
        if self._reading is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reading), CANCEL_WAIT_S)


async def _exit_status(process: Any) -> str:
    for _ in range(50):  # the socket can close a moment before the process is reaped
        if process.exitcode is not None:
            break
        await asyncio.sleep(0.02)
    code = process.exitcode
    if code is None:
        return "its connection closed while it still ran"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def start_method() -> str:
    """forkserver where the platform has it (one import, then a cheap fork per worker), else spawn."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class ProcessPool:
    """`count` worker processes on this machine, each with its own event loop and connection pool."""

    kind: Final = "processes"

    def __init__(self, config: WorkerConfig, count: int) -> None:
        if count < 1:
            raise InvalidInput("workers", "must be at least 1")
        self.config = config
        self.count = count
        self.method = start_method()
        self.links: list[ProcessLink] = []
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="tokenrace-workers-")
        path = str(Path(self._dir.name) / "parent.sock")
        ready: asyncio.Queue[int] = asyncio.Queue()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            hello = await _read_frame(reader)
            assert isinstance(hello, Hello)
            self.links[hello.index].attach(reader, writer, hello.who)
            ready.put_nowait(hello.index)

        self._server = await asyncio.start_unix_server(accept, path)
        ctx: Any = multiprocessing.get_context(self.method)  # typeshed lacks Process on BaseContext
        if self.method == "forkserver":
            ctx.set_forkserver_preload(["tokenrace.load.workers"])
        for i in range(self.count):
            p = ctx.Process(target=process_main, args=(i, self.config, path), name=f"tokenrace-worker-{i}", daemon=True)
            self.links.append(ProcessLink(i, p))
        for link in self.links:
            link.process.start()
        try:
            await self._wait_ready(ready)
        except BaseException:
            await self.close()
            raise
        own = clock_id()
        for link in self.links:
            assert link.identity is not None
            link.clock = await probe(link.clock_now, shared=link.identity.clock_id == own)

    async def _wait_ready(self, ready: asyncio.Queue[int]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        seen: set[int] = set()
        while len(seen) < self.count:
            dead = [link for link in self.links if link.index not in seen and link.process.exitcode is not None]
            if dead:
                link = dead[0]
                raise TokenraceError(f"worker {link.index} exited while starting: {await _exit_status(link.process)}")
            if time.monotonic() > deadline:
                raise TokenraceError(f"only {len(seen)} of {self.count} workers started within {START_TIMEOUT_S:.0f} s")
            with contextlib.suppress(TimeoutError):
                seen.add(await asyncio.wait_for(ready.get(), 0.2))

    async def close(self) -> None:
        await asyncio.gather(*(link.stop() for link in self.links if link.alive))
        for link in self.links:
            p = link.process
            if p.pid is None:
                continue
            await asyncio.get_running_loop().run_in_executor(None, p.join, CANCEL_WAIT_S)
            if p.exitcode is None:
                p.kill()
                p.join(1)
        if self._server is not None:
            self._server.close()
        if self._dir is not None:
            self._dir.cleanup()

    def describe(self) -> PoolSetup:
        return PoolSetup(start_method=self.method)


@dataclass(frozen=True, slots=True)
class WorkersSpec:
    """--workers and --ray: how many sending processes, and where."""

    count: int | None = None  # None: auto
    ray: str | None = None  # "auto" or a cluster address; None: processes on this machine

    @property
    def auto(self) -> bool:
        return self.count is None


def parse_workers(text: str | None) -> int | None:
    """`N` or `auto` (None); raises InvalidInput."""
    if text is None or text == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        raise InvalidInput("workers", f"takes a number or 'auto', got {text!r}") from None
    if n < 1:
        raise InvalidInput("workers", "must be at least 1")
    return n


def resolve_count(spec: WorkersSpec, streams: int) -> tuple[int, str | None]:
    """(sending processes, why) for --workers; `auto` reads the saved calibration of this machine's
    client, and without one sends from this one process."""
    if spec.count is not None:
        return spec.count, None
    ceiling = calibrated_ceiling()
    if ceiling is None:
        return 1, "no calibration of this machine's client yet (`tokenrace calibrate` measures it): one process sends"
    chunks, ceiling_streams = ceiling.chunks_per_s, ceiling.streams
    if chunks is None or ceiling_streams is None:
        n = usable_cpus()
        return n, "the calibration found no load this client times within 1 ms: one process per usable CPU"
    n = pick_workers(None, streams, chunks, ceiling_streams, usable_cpus())
    return n, f"{streams} streams against a one-process ceiling of {ceiling_streams} streams and {chunks:,.0f} chunks/s"


def manifest_section(
    requested: str, reason: str | None, pool: Pool | None = None, dispatcher: Dispatcher | None = None
) -> WorkersInfo:
    """The manifest's `workers`."""
    if pool is None or dispatcher is None:
        return WorkersInfo(kind="process", count=1, requested=requested, reason=reason)
    rows = []
    for link in pool.links:
        clock, who = link.clock, link.identity
        rows.append(
            WorkerInfo(
                index=link.index,
                pid=who.pid if who else None,
                host=who.host if who else None,
                node=getattr(link, "node", None),
                clock_offset_ns=clock.offset_ns if clock else None,
                clock_rtt_ns=clock.rtt_ns if clock else None,
                clock_error_ns=clock.error_ns if clock else None,
                clock_shared=clock.shared if clock else None,
                clock_applied_ns=clock.applied_ns if clock else None,
                requests=dispatcher.sent[link.index],
                died=link.death,
            )
        )
    setup = pool.describe()
    return WorkersInfo(
        kind=pool.kind,
        count=len(pool.links),
        requested=requested,
        reason=reason,
        lead_ms=dispatcher.lead_ns / 1e6,
        start_method=setup.start_method,
        ray_address=setup.ray_address,
        lost_requests=dispatcher.lost_requests,
        workers=rows,
    )


def fault_warnings(dispatcher: Dispatcher) -> list[RunWarning]:
    """One warning per worker that died, for the summary's warnings."""
    out = [RunWarning(code="workers.died", message=death) for death in dispatcher.deaths()]
    if out and dispatcher.lost_requests:
        out.append(
            RunWarning(
                code="workers.lost_requests",
                message=f"{dispatcher.lost_requests} requests in flight on a dead worker are recorded as "
                "worker_lost; every record received is kept",
                figures={"lost_requests": dispatcher.lost_requests},
            )
        )
    return out
