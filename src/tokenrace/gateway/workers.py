"""One worker of a gateway that runs as several processes (`tokenrace gateway --workers N`).

Each worker is a whole gateway (the same code as a single process) listening on the shared port
with SO_REUSEPORT, so the kernel spreads new connections over the workers. What makes the workers
one gateway:

* **State.** Without `state:` in the file, the supervisor runs a private redis-server on a Unix
  socket in its run directory and hands its URL to the workers (`STATE_URL_ENV`); each worker then
  shares rate limits, breakers and canary decisions through it exactly as instances do with
  `state: {redis_url_env: ...}` (shared.py). With `state:` in the file, that Redis is used.
* **Views.** Each worker also answers its peers on `worker-<index>.sock` in the run directory:
  one line (`state` or `metrics`) in, its own /admin/state JSON or /metrics text out. The worker
  that takes a GET /metrics or /admin/state asks every peer and answers for the whole gateway:
  counters and histograms summed, in-flight summed, breaker and canary gauges (one shared state)
  the highest any worker shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tokenrace.gateway import admin
from tokenrace.gateway.app import Gateway
from tokenrace.gateway.config import Secret, StateConfig, load_config, resolve_secrets
from tokenrace.gateway.http import Handler, Reply, Request, Stream
from tokenrace.gateway.views import GatewayState, RoutingView, WorkerView

RUN_DIR_ENV = "TOKENRACE_GATEWAY_RUN_DIR"
WORKERS_ENV = "TOKENRACE_GATEWAY_WORKERS"
INDEX_ENV = "TOKENRACE_GATEWAY_WORKER_INDEX"
STATE_URL_ENV = "TOKENRACE_GATEWAY_WORKERS_STATE_URL"
PEER_TIMEOUT_S = 2.0
MERGED = frozenset({"/metrics", "/admin/state"})  # what a worker answers for all of them
# Gauges that are this worker's own count (summed over workers); the other gauges mirror the one
# shared state (breakers, canary weights, the lease), so the highest reading is the gateway's.
SUMMED_GAUGES = frozenset({"tokenrace_gateway_in_flight"})


def peer_path(run_dir: Path, index: int) -> Path:
    return run_dir / f"worker-{index}.sock"


class Worker:
    """This process's place among the workers: its index, its peers, its Unix socket."""

    def __init__(self, run_dir: Path, index: int, count: int, gw: Gateway) -> None:
        self.run_dir = run_dir
        self.index = index
        self.count = count
        self.gw = gw
        self._server: asyncio.AbstractServer | None = None

    @classmethod
    def from_env(cls, gw: Gateway, env: Mapping[str, str]) -> Worker | None:
        run_dir = env.get(RUN_DIR_ENV)
        if not run_dir:
            return None
        return cls(Path(run_dir), int(env[INDEX_ENV]), int(env[WORKERS_ENV]), gw)

    async def wrap(self, inner: Handler) -> Handler:
        """Start answering peers; return a handler whose /metrics and /admin/state cover every worker."""
        path = peer_path(self.run_dir, self.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by the worker this one replaces
        self._server = await asyncio.start_unix_server(self._answer_peer, path=str(path))
        os.chmod(path, 0o600)

        async def whole(request: Request) -> Reply | Stream | None:
            reply = await inner(request)
            if isinstance(reply, Reply) and reply.status == 200:
                if request.path == "/metrics":
                    reply.body = await self.whole_metrics(reply.body)
                else:
                    own = self.own_state(GatewayState.model_validate_json(reply.body))
                    reply.body = (await self.whole_state(own)).to_json()
            return reply

        def dispatch(request: Request) -> Awaitable[Reply | Stream | None]:
            # Not a coroutine itself: a proxied request goes straight to the inner handler's.
            if request.path in MERGED and request.method in ("GET", "HEAD"):
                return whole(request)
            return inner(request)

        return dispatch

    async def _answer_peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            what = (await asyncio.wait_for(reader.readline(), PEER_TIMEOUT_S)).strip().decode()
            if what == "state":
                writer.write(self.own_state(admin.state(self.gw)).to_json())
            elif what == "metrics":
                writer.write(generate_latest(self.gw.metrics.registry))
            await writer.drain()
        except (TimeoutError, OSError, UnicodeDecodeError):
            pass  # a peer that gave up: nothing to answer
        finally:
            writer.close()

    def own_state(self, state: GatewayState) -> GatewayState:
        """This worker's /admin/state, with the client requests it answered (served or refused)."""
        answered = 0.0
        for metric in (self.gw.metrics.requests, self.gw.metrics.rejected):
            for family in metric.collect():
                answered += sum(s.value for s in family.samples if s.name.endswith("_total"))
        if self.gw.local_state is not None and self.gw.runtime.config.state is None:
            # Not the file's `state:`: the supervisor's private Redis, one per gateway of N workers.
            state.state.shared_by = f"the {self.count} workers (the supervisor's redis-server)"
        state.answered_requests = int(answered)
        return state

    async def _ask(self, index: int, what: str) -> bytes | None:
        """A peer's view; None when it does not answer (it died and is being replaced)."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(peer_path(self.run_dir, index))), PEER_TIMEOUT_S
            )
        except (TimeoutError, OSError):
            return None
        try:
            writer.write(what.encode() + b"\n")
            return await asyncio.wait_for(reader.read(), PEER_TIMEOUT_S)
        except (TimeoutError, OSError):
            return None
        finally:
            writer.close()

    async def _views(self, what: str) -> dict[int, bytes | None]:
        peers = [i for i in range(self.count) if i != self.index]
        answers = await asyncio.gather(*(self._ask(i, what) for i in peers))
        return dict(zip(peers, answers, strict=True))

    async def whole_metrics(self, own: bytes) -> bytes:
        texts = [own, *(t for t in (await self._views("metrics")).values() if t)]
        return merge_metrics([t.decode() for t in texts])

    async def whole_state(self, own: GatewayState) -> GatewayState:
        views: dict[int, GatewayState | None] = {self.index: own}
        for index, raw in (await self._views("state")).items():
            views[index] = GatewayState.model_validate_json(raw) if raw else None
        return merge_state(views, self.index)


# --- /metrics ----------------------------------------------------------------------------------------


class _Merged(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def merge_metrics(texts: list[str]) -> bytes:
    """Several workers' /metrics as one: samples of the same name and labels summed (counters,
    histograms, in-flight), or the highest taken (gauges mirroring the shared state); `_created`
    is the earliest."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            seen = values.setdefault(family.name, {})
            summed = family.type != "gauge" or family.name in SUMMED_GAUGES
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = seen.get(key)
                if old is None:
                    seen[key] = sample.value
                elif sample.name.endswith("_created"):
                    seen[key] = min(old, sample.value)
                else:
                    seen[key] = old + sample.value if summed else max(old, sample.value)
    out = []
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
        out.append(family)
    registry = CollectorRegistry()
    registry.register(_Merged(out))
    return generate_latest(registry)


# --- /admin/state ------------------------------------------------------------------------------------


def merge_state(views: Mapping[int, GatewayState | None], responder: int) -> GatewayState:
    """The responding worker's state, with what is per worker added up over all of them: requests in
    flight per backend, each pool's decision counts and moves. `workers` lists each one (pid,
    generation, in flight, draining), or `answered: false` for one that did not answer."""
    own = views[responder]
    assert own is not None
    # A deep copy, less this worker's own count of answered requests (each worker's is in `workers`).
    whole = GatewayState.model_validate(own.model_dump(exclude={"answered_requests"}, exclude_unset=True))
    workers: list[WorkerView] = []
    for index in sorted(views):
        view = views[index]
        if view is None:
            workers.append(WorkerView(index=index, answered=False))
            continue
        workers.append(
            WorkerView(
                index=index,
                answered=True,
                pid=view.pid,
                started_unix=view.started_unix,
                generation=view.config.generation,
                last_reload_error=view.config.last_reload_error,
                draining=view.draining,
                in_flight=sum(b.in_flight for b in view.backends.values()),
                answered_requests=view.answered_requests,
            )
        )
        if index != responder:
            _add_counts(whole, view)
    whole.workers = workers
    whole.answered_by = responder
    whole.draining = any(w.draining for w in workers)
    return whole


def _add_counts(whole: GatewayState, view: GatewayState) -> None:
    for name, backend in view.backends.items():
        if name in whole.backends:
            whole.backends[name].in_flight += backend.in_flight
    for name, route in view.routes.items():
        mine = whole.routes.get(name)
        if mine is None:
            continue  # a reload is half way: the responder does not have this route yet
        for target, theirs in zip(mine.targets, route.targets, strict=False):
            a, b = target.routing, theirs.routing
            if a is None or b is None:
                continue
            for backend_name, counts in b.counts.items():
                into = a.counts.setdefault(backend_name, {})
                for reason, n in counts.items():
                    into[reason] = into.get(reason, 0) + n
            _add_pool_figures(a, b)


def _add_pool_figures(whole: RoutingView, view: RoutingView) -> None:
    """A prefix_affinity pool's moves and remembered keys, summed over workers. Each worker keeps
    its own placements; when one of them shows no figure for the pool (a reload half way, with
    another policy there) or an undefined one, the whole pool's figure is undefined: null, not the
    sum of the others."""
    if "moved" in whole.model_fields_set:
        whole.moved = _sum_or_none(whole.moved, view.moved)
    if "keys_remembered" in whole.model_fields_set:
        whole.keys_remembered = _sum_or_none(whole.keys_remembered, view.keys_remembered)


def _sum_or_none(a: int | None, b: int | None) -> int | None:
    return a + b if a is not None and b is not None else None


# --- the end ---------------------------------------------------------------------------------------


def exit_when_orphaned(grace_s: float) -> None:
    """If the supervisor dies, the kernel sends this worker SIGTERM (PR_SET_PDEATHSIG) and it drains;
    should the drain not end, nobody would ever stop it: exit `grace_s` after the supervisor left."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


# --- start-up ---------------------------------------------------------------------------------------


def worker_gateway(path: Path, env: Mapping[str, str]) -> Gateway:
    """The Gateway of one worker: the file's settings; without `state:`, the supervisor's Redis."""
    config = load_config(path, env)
    secrets = resolve_secrets(config, env)
    url = env.get(STATE_URL_ENV)
    local = (StateConfig(redis_url_env=STATE_URL_ENV), Secret(url)) if url and config.state is None else None
    return Gateway(config, secrets, path, env, local_state=local)
