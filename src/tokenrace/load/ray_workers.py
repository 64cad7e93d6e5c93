"""Workers as Ray actors spread over a Ray cluster's nodes (`--ray auto|ADDRESS`).

The same scheduler (the parent's runner) and the same dispatcher as worker processes: only the
pipe differs. Each actor is an async Ray actor holding one `WorkerCore` (the existing client on its
own event loop); a send is one actor call that returns the finished record. Actors are placed with
Ray's SPREAD scheduling strategy, one CPU each, so they land on different nodes while nodes last.

Clocks: an actor on another machine stamps with that machine's CLOCK_MONOTONIC. Before the load the
parent probes each actor's clock (`clocks.probe`, the minimum-round-trip midpoint); the offset and
its error bound go into the manifest, open-loop deadlines are handed out on the actor's clock, and
the actor's stamps are moved onto the parent's. An actor on the parent's own kernel (same boot id)
shares its clock exactly, and nothing is applied to it.

The API key travels to the actors as a constructor argument (Ray keeps it in the cluster's memory,
not in a file or a log line).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput, TokenraceError
from tokenrace.load.clocks import ClockOffset, probe
from tokenrace.load.worker_core import Identity, WorkerConfig, WorkerCore, clock_id, identity
from tokenrace.load.workers import PoolSetup, WorkerLost
from tokenrace.model.records import RequestRecord

perf_ns = time.perf_counter_ns


def _ray() -> Any:
    try:
        import ray  # noqa: PLC0415 - optional dependency: Ray is the ray extra, needed only with --ray
    except ImportError:
        raise InvalidInput("ray", "needs Ray: pip install 'tokenrace[ray]'") from None
    return ray


class RayWorker:
    """The actor: one client sending what the parent hands it (made remote by `RayPool.start`)."""

    def __init__(self, index: int, config: WorkerConfig) -> None:
        self.index = index
        self.core = WorkerCore(config)

    async def hello(self) -> tuple[Identity, str]:
        await self.core.open()
        return identity(), _ray().get_runtime_context().get_node_id()

    async def clock(self) -> int:
        return perf_ns()

    async def job(self, job_id: int, fire_at_ns: int | None, prompt: Prompt, rec: RequestRecord) -> RequestRecord:
        return await self.core.job(job_id, fire_at_ns, prompt, rec)

    async def cancel(self, job_id: int) -> None:
        self.core.cancel(job_id)

    async def stop(self) -> None:
        await self.core.close()


class RayLink:
    """The parent's end of one actor."""

    def __init__(self, index: int, actor: Any) -> None:
        self.index = index
        self.actor = actor
        self.identity: Identity | None = None
        self.node: str | None = None
        self.clock: ClockOffset | None = None
        self.death: str | None = None

    @property
    def alive(self) -> bool:
        return self.death is None

    def submit(
        self, job_id: int, fire_at_ns: int | None, prompt: Prompt, rec: RequestRecord
    ) -> asyncio.Future[RequestRecord]:
        return asyncio.ensure_future(self._call(self.actor.job.remote(job_id, fire_at_ns, prompt, rec)))

    async def _call(self, ref: Any) -> Any:
        ray = _ray()
        try:
            return await ref
        except ray.exceptions.RayActorError as exc:
            if self.death is None:
                self.death = f"worker {self.index} (Ray actor on node {self.node}) died: {type(exc).__name__}"
            raise WorkerLost(self.death) from None

    def cancel(self, job_id: int) -> None:
        if self.alive:
            self.actor.cancel.remote(job_id)

    async def clock_now(self) -> int:
        return int(await self._call(self.actor.clock.remote()))


class RayPool:
    """`count` actors (None: one per alive node) on the Ray cluster at `address` ('auto': the running one)."""

    kind: Final = "ray"

    def __init__(self, config: WorkerConfig, count: int | None, address: str) -> None:
        if count is not None and count < 1:
            raise InvalidInput("workers", "must be at least 1")
        self.config = config
        self.count = count
        self.address = address
        self.links: list[RayLink] = []

    async def start(self) -> None:
        ray = _ray()
        try:
            ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False, ignore_reinit_error=True)
        except ConnectionError as exc:
            raise InvalidInput("ray", f"{self.address}: no Ray cluster answered ({exc})") from None
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        count = self.count or max(1, len(nodes))
        actor_class = ray.remote(RayWorker).options(
            scheduling_strategy="SPREAD", num_cpus=1, max_concurrency=max(1000, 2 * self.config.max_connections)
        )
        self.links = [RayLink(i, actor_class.remote(i, self.config)) for i in range(count)]
        try:
            hellos = await asyncio.gather(*(link._call(link.actor.hello.remote()) for link in self.links))
        except WorkerLost as exc:
            raise TokenraceError(f"a Ray worker failed to start: {exc}") from None
        own = clock_id()
        for link, (who, node) in zip(self.links, hellos, strict=True):
            link.identity, link.node = who, node
            link.clock = await probe(link.clock_now, shared=who.clock_id == own)

    async def close(self) -> None:
        ray = _ray()
        for link in self.links:
            if link.alive:
                try:
                    await asyncio.wait_for(link._call(link.actor.stop.remote()), 10)
                except (WorkerLost, TimeoutError):
                    pass
            ray.kill(link.actor)
        ray.shutdown()

    def describe(self) -> PoolSetup:
        return PoolSetup(ray_address=self.address)
