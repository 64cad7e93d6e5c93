"""What runs inside one worker (an OS process or a Ray actor): the existing client, sending what the
parent's scheduler hands it.

A job is one request: a prompt, the record the parent's runner made for it, and, in an open loop,
the absolute `perf_counter_ns()` deadline (in this worker's clock) at which to send it. The worker
decides nothing about the load: it sleeps to the deadline, calls `OpenAIClient.send`, and returns
the record. Cancelling a job ends its stream the way Ctrl-C does in one process (the record says
`cancelled`), and the record is still returned.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.transport import Timeouts
from tokenrace.load.runner import keep_awake, quiet_gc, sleep_until
from tokenrace.model.records import RequestRecord

perf_ns = time.perf_counter_ns


@dataclass(slots=True)
class WorkerConfig:
    """Everything a worker needs to build its client. Sent to the worker once, never written anywhere."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    options: RequestOptions = field(default_factory=RequestOptions)
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_connections: int = 64
    keep_awake: bool = True


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a worker is, and which clock it stamps with.

    `clock_id` names the kernel whose CLOCK_MONOTONIC the worker reads (the host's boot id): two
    processes with the same one read the same clock, so their stamps need no correction.
    """

    pid: int
    host: str
    clock_id: str


def identity() -> Identity:
    return Identity(os.getpid(), socket.gethostname(), clock_id())


def clock_id() -> str:
    """TOKENRACE_CLOCK_ID, when set, names the clock instead: for processes that share a kernel but
    not its clock (Linux time namespaces), whose offset must then be measured and applied."""
    declared = os.environ.get("TOKENRACE_CLOCK_ID")
    if declared:
        return declared
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    # Without a boot id (not Linux) only the process itself is known to share its clock.
    return boot or f"{socket.gethostname()}:{os.getpid()}"


class WorkerCore:
    """One client and the jobs in flight on it. Used inside a running event loop."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.client = OpenAIClient(
            config.base_url,
            config.model,
            config.api_key,
            config.options,
            config.timeouts,
            max_connections=config.max_connections,
        )
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._gc = quiet_gc()

    async def open(self) -> None:
        await self.client.__aenter__()
        self._gc.__enter__()
        if self.config.keep_awake:
            self._ticker = asyncio.create_task(keep_awake())

    async def close(self) -> None:
        await self.cancel_all()
        if self._ticker is not None:
            self._ticker.cancel()
        self._gc.__exit__(None, None, None)
        await self.client.__aexit__(None, None, None)

    async def job(self, job_id: int, fire_at_ns: int | None, prompt: Prompt, rec: RequestRecord) -> RequestRecord:
        """Send at `fire_at_ns` (or now) and return the finished record, cancelled or not."""
        task = asyncio.create_task(self._send(fire_at_ns, prompt, rec))
        self._jobs[job_id] = task
        try:
            await asyncio.wait({task})
        finally:
            self._jobs.pop(job_id, None)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            # The client never raises for a failed request; this is a defect, and it must not leave
            # the parent waiting for a record that never comes.
            rec.start_ns = rec.start_ns or perf_ns()
            rec.end_ns = rec.end_ns or perf_ns()
            rec.fail("worker_error", f"the worker's client raised {type(exc).__name__}: {exc}")
        if rec.error_kind is None and task.cancelled():
            # Cancelled before the send began: nothing reached the server.
            rec.start_ns = rec.start_ns or perf_ns()
            rec.end_ns = rec.end_ns or rec.start_ns
            rec.fail("cancelled", "interrupted before the request was sent")
        return rec

    async def _send(self, fire_at_ns: int | None, prompt: Prompt, rec: RequestRecord) -> None:
        if fire_at_ns is not None:
            await sleep_until(fire_at_ns)
        await self.client.send(prompt, rec)

    def cancel(self, job_id: int) -> None:
        task = self._jobs.get(job_id)
        if task is not None:
            task.cancel()

    async def cancel_all(self) -> None:
        tasks = list(self._jobs.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)

    @property
    def in_flight(self) -> int:
        return len(self._jobs)
