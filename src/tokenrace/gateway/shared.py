"""State that several gateway instances share through Redis: rate limits, breakers, canaries.

With `state: {redis_url_env: NAME}` in the config, instances behind one load balancer act as one:

* **Rate limits**: each client key's token bucket lives in Redis and is taken by a Lua script
  (one EVALSHA round trip per limited request, on Redis's own clock), so the limit holds overall.
* **Breakers**: a transition to open or closed is written to one hash; every instance polls it each
  `sync_interval_s` and adopts the others' states into its local mirror, which the hot path reads.
* **Canaries**: one instance holds a lease (`SET NX PX`, renewed on each sync, with an epoch in its
  token). Only the holder takes automatic decisions; it writes each one with a script that checks
  the lease and the record's version in the same step (so a holder that lost the lease cannot
  write: the lease token is the fencing token). The others follow the record within one sync, and
  ship the canary and baseline samples they see to the holder, which decides on all of them.
  A decision by hand (`POST /admin/canary/...`) on any instance is written at once.

If Redis cannot be reached, each instance goes on with its local state (the same code as a single
instance), counts the fallback, logs one warning, and keeps trying; when Redis answers again it
re-reads the shared state. Canary decisions taken meanwhile are written back if they are newer
than the shared record's last one.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from tokenrace.gateway import clock
from tokenrace.gateway.breaker import Transition
from tokenrace.gateway.canary import Canary, Sample
from tokenrace.gateway.config import RouteConfig, Secret, StateConfig
from tokenrace.gateway.views import BreakerRecord, CanaryRecord, Decision, SharedView

if TYPE_CHECKING:
    from tokenrace.gateway.runtime import Backend, Route, Runtime

ERRORS = (RedisError, OSError, asyncio.TimeoutError)
MAX_OUTBOX = 50_000  # samples kept for the lease holder while a sync is slow
MAX_SAMPLE_BATCHES = 1_000  # batches kept in Redis when no instance holds the lease

# Token bucket: 0 when a token was taken, else the microseconds until one is available.
BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local saved = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(saved[1]) or capacity
local stamp = tonumber(saved[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - stamp) * rate)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.ceil((1 - tokens) / rate * 1000000)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'stamp', string.format('%.17g', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000) + 1000)
return wait
"""

# The decision lease: renew it if ARGV[3] holds it, take it if free; returns the holder's token.
LEASE_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder and holder == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return holder
end
if not holder then
  local token = ARGV[1] .. '/' .. redis.call('INCR', KEYS[2])
  if redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
    return token
  end
  return redis.call('GET', KEYS[1])
end
return holder
"""

RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# A canary decision: -1 if the lease (when one is needed) is not ARGV[1]'s, -2 if the record moved
# past the expected version; else the new version.
CANARY_LUA = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return -1
end
local version = tonumber(redis.call('HGET', KEYS[1], 'version')) or 0
local expected = tonumber(ARGV[2])
if expected >= 0 and expected ~= version then
  return -2
end
version = version + 1
redis.call('HSET', KEYS[1], 'version', version, 'fingerprint', ARGV[3], 'data', ARGV[4], 'last_unix', ARGV[5])
if ARGV[6] == '1' then
  redis.call('DEL', KEYS[2])
end
for i = 7, #ARGV do
  redis.call('LPUSH', KEYS[2], ARGV[i])
end
redis.call('LTRIM', KEYS[2], 0, 99)
return version
"""

TAKE_ALL_LUA = """
local batches = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
return batches
"""


def _local_wins(canary: Canary, record: CanaryRecord, record_last_unix: float) -> bool:
    """After an outage: do the decisions this instance took meanwhile replace the shared ramp?
    A rollback wins over anything else (safety first); otherwise the newest decision wins."""
    if not canary.unshared:
        return False
    mine = (canary.state == "rolled_back", canary.unshared[-1].at_unix)
    theirs = (record.state == "rolled_back", record_last_unix)
    return mine > theirs


def canary_fingerprint(route: RouteConfig) -> str:
    """Instances follow one shared ramp only when they run the same canary over the same baseline."""
    doc = orjson.dumps(
        {
            "canary": route.canary.model_dump() if route.canary else None,
            "backends": [t.model_dump() for t in route.backends],
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(doc).hexdigest()[:16]


class SharedState:
    """The Redis side of one gateway instance: the connection, its health, the lease, the scripts."""

    def __init__(
        self,
        config: StateConfig,
        url: Secret,
        warn: Callable[..., None],
        event: Callable[..., None],
        on_fallback: Callable[[], None],
    ) -> None:
        self.config = config
        self.prefix = config.key_prefix
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.client = aioredis.Redis.from_url(
            url.reveal(),
            socket_timeout=config.timeout_s,
            socket_connect_timeout=config.timeout_s,
            retry=Retry(NoBackoff(), 0),  # a failure falls back at once; the sync loop reconnects
            decode_responses=True,
        )
        self.up: bool | None = None  # None until the first contact
        self.leader = False
        self.holder: str | None = None
        self.fallbacks = 0
        self.last_error: str | None = None
        self._token = ""
        self._warn, self._event, self._on_fallback = warn, event, on_fallback
        self._bucket = self.client.register_script(BUCKET_LUA)
        self._lease = self.client.register_script(LEASE_LUA)
        self._release = self.client.register_script(RELEASE_LUA)
        self._canary = self.client.register_script(CANARY_LUA)
        self._take_all = self.client.register_script(TAKE_ALL_LUA)
        self._breakers_seen: dict[str, str] = {}
        self._mismatch_warned: set[str] = set()

    # -- keys -------------------------------------------------------------------------------------------

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    # -- health -----------------------------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self.leader, self._token, self.holder = False, "", None
        if self.up is not False:
            self.up = False
            self.fallbacks += 1
            self._on_fallback()
            self._warn("state_backend_down", error=self.last_error, note="serving with this instance's local state")

    def _recovered(self, rt: Runtime) -> None:
        was = self.up
        self.up = True
        self._breakers_seen.clear()
        for route in rt.routes.values():
            if route.canary is not None:
                route.canary.shared_version = None  # re-read (or write back) the shared ramp
        self._event("state_backend_up", instance=self.instance, after_fallback=was is False)

    def reloaded(self) -> None:
        self._breakers_seen.clear()

    def decides(self, canary: Canary) -> bool:
        """Does this instance take this canary's automatic decisions? The lease holder, once it follows
        the shared record; every instance when Redis is unreachable (each on its own)."""
        return self.up is not True or (self.leader and canary.shared_version is not None)

    # -- rate limits (the hot path) ---------------------------------------------------------------------

    async def take(self, client: str, rate: float, capacity: float) -> tuple[bool, float | None]:
        """(answered, wait): wait is None when the request may go on; answered False = use local state."""
        try:
            micros = await self._bucket(keys=[self.key("rate", client)], args=[repr(rate), repr(capacity)])
        except ERRORS as exc:
            self._failed(exc)
            return False, None
        return True, (None if int(micros) == 0 else int(micros) / 1e6)

    # -- breakers ---------------------------------------------------------------------------------------

    async def write_breaker(self, backend: Backend, now: float, wall: float) -> None:
        if self.up is not True:
            return
        raw = backend.breaker.shared_record(now, wall, self.instance).to_json().decode()
        self._breakers_seen[backend.name] = raw
        try:
            await self.client.hset(self.key("breakers"), backend.name, raw)
        except ERRORS as exc:
            self._failed(exc)

    async def _sync_breakers(
        self, rt: Runtime, now: float, wall: float, adopted: Callable[[Backend, Transition, str], None]
    ) -> None:
        stored: dict[str, str] = await self.client.hgetall(self.key("breakers"))  # type: ignore[assignment]
        for name, raw in stored.items():
            backend = rt.backends.get(name)
            if backend is None or self._breakers_seen.get(name) == raw:
                continue
            self._breakers_seen[name] = raw
            record = BreakerRecord.model_validate_json(raw)
            state, until, by = record.state, record.open_until_unix, str(record.by)
            if by == self.instance or backend.breaker.refresh(now) == state:
                continue
            if state == "open" and (until is None or until <= wall):
                continue  # an open period that has already ended: nothing to adopt
            if state in ("open", "closed"):
                transition = backend.breaker.adopt(state, record.reason, until, now, wall)
                adopted(backend, transition, by)

    # -- canaries ---------------------------------------------------------------------------------------

    async def decided(self, route: Route, decision: Decision) -> None:
        """Write a decision this instance took (automatic: under the lease; by hand: at once)."""
        canary = route.canary
        assert canary is not None
        if self.up is not True:
            canary.unshared.append(decision)
            return
        by_hand = decision.by == "admin"
        if not by_hand and (not self.leader or canary.shared_version is None):
            return
        expected = -1 if by_hand else canary.shared_version
        assert expected is not None
        version = await self._write_canary(route, canary, [decision], self._token if not by_hand else "", expected)
        if version is None:
            canary.unshared.append(decision)
        elif version < 0:
            canary.shared_version = None  # lost the lease or the race: re-read the shared ramp
            self._event("canary_decision_dropped", route=route.name, action=decision.action, why=-version)
        else:
            canary.shared_version = version

    async def _write_canary(
        self, route: Route, canary: Canary, decisions: list[Decision], token: str, expected: int, reset: bool = False
    ) -> int | None:
        now, wall = clock.monotonic(), clock.wall()
        last = max((d.at_unix for d in decisions), default=wall)
        keys = [self.key("canary", route.name), self.key("canary", route.name, "log"), self.key("lease")]
        args: list[str | bytes] = [
            token,
            str(expected),
            canary_fingerprint(route.config),
            canary.shared_record(now, wall).to_json(),
            repr(last),
            "1" if reset else "0",
            *(d.to_json() for d in decisions),
        ]
        try:
            return int(await self._canary(keys=keys, args=args))
        except ERRORS as exc:
            self._failed(exc)
            return None

    async def _sync_canary(self, route: Route, now: float, wall: float) -> None:
        canary = route.canary
        assert canary is not None
        canary.instance = self.instance
        fields = ["version", "fingerprint", "last_unix", "data"]
        found: list[str | None] = await self.client.hmget(self.key("canary", route.name), fields)  # type: ignore[assignment]
        version_s, fingerprint, last_s, data = found
        if version_s is None or data is None or fingerprint != canary_fingerprint(route.config):
            await self._start_ramp(route, canary, version_s is not None)
            return
        version = int(version_s)
        if version != canary.shared_version:
            if canary.shared_version is None and _local_wins(
                canary, CanaryRecord.model_validate_json(data), float(last_s or 0)
            ):
                written = await self._write_canary(route, canary, canary.unshared, "", version)
                if written is not None and written > 0:
                    canary.shared_version = written
                    canary.unshared.clear()
                return
            await self._adopt_canary(route, canary, version, now, wall)
        await self._pool_samples(route, canary, now, wall)

    async def _start_ramp(self, route: Route, canary: Canary, other_config: bool) -> None:
        """No shared ramp for this configuration yet: the lease holder starts it from its copy."""
        if self.leader:
            key = self.key("canary", route.name)
            expected = int(await self.client.hget(key, "version") or 0)
            version = await self._write_canary(route, canary, list(canary.decisions), self._token, expected, True)
            canary.shared_version = version if version is not None and version > 0 else None
        elif other_config and route.name not in self._mismatch_warned:
            self._mismatch_warned.add(route.name)
            self._warn("canary_config_differs", route=route.name, note="not following until the configs match")

    async def _adopt_canary(self, route: Route, canary: Canary, version: int, now: float, wall: float) -> None:
        key = self.key("canary", route.name)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hmget(key, ["version", "data"])
            pipe.lrange(self.key("canary", route.name, "log"), 0, -1)
            (version_b, data), log = await pipe.execute()
        if version_b is None or data is None:
            return
        decisions = [Decision.model_validate_json(d) for d in reversed(log)]
        before = canary.weight
        canary.adopt(CanaryRecord.model_validate_json(data), decisions, now, wall)
        canary.shared_version = int(version_b)
        canary.unshared.clear()
        if canary.weight != before:
            self._event("canary_followed", route=route.name, from_weight_pct=before, to_weight_pct=canary.weight)

    async def _pool_samples(self, route: Route, canary: Canary, now: float, wall: float) -> None:
        """Followers ship their samples; the lease holder takes everyone's into its window."""
        key = self.key("canary", route.name, "samples")
        if self.leader:
            canary.outbox = None
            batches = await self._take_all(keys=[key])
            for batch in batches:
                for arm, t_unix, ok, ttft, tpot, e2e in orjson.loads(batch):
                    canary.samples[arm].append(Sample(now - (wall - t_unix), ok, ttft, tpot, e2e))
            return
        outbox = canary.outbox
        canary.outbox = []
        if not outbox:
            return
        rows = [[arm, wall - (now - s.t), s.ok, s.ttft_s, s.tpot_s, s.e2e_s] for arm, s in outbox[-MAX_OUTBOX:]]
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.rpush(key, orjson.dumps(rows))
            pipe.ltrim(key, -MAX_SAMPLE_BATCHES, -1)
            pipe.pexpire(key, int(self.config.lease_s * 10_000))
            await pipe.execute()

    # -- the loop ---------------------------------------------------------------------------------------

    async def sync(self, rt: Runtime, adopted: Callable[[Backend, Transition, str], None]) -> None:
        """One round: check the connection, hold or take the lease, follow breakers and canaries."""
        now, wall = clock.monotonic(), clock.wall()
        try:
            if self.up is not True:
                await self.client.ping()
                self._recovered(rt)
            await self._renew_lease()
            await self._sync_breakers(rt, now, wall, adopted)
            for route in rt.routes.values():
                if route.canary is not None and route.canary_target is not None:
                    await self._sync_canary(route, now, wall)
        except ERRORS as exc:
            self._failed(exc)
            for route in rt.routes.values():
                if route.canary is not None:
                    route.canary.outbox = None

    async def _renew_lease(self) -> None:
        ttl = str(int(self.config.lease_s * 1000))
        holder = await self._lease(
            keys=[self.key("lease"), self.key("lease_epoch")], args=[self.instance, ttl, self._token]
        )
        self.holder = str(holder)
        was = self.leader
        self.leader = self.holder.rsplit("/", 1)[0] == self.instance
        self._token = self.holder if self.leader else ""
        if self.leader != was:
            self._event(
                "canary_lease_" + ("taken" if self.leader else "lost"), instance=self.instance, lease=self.holder
            )

    async def close(self) -> None:
        try:
            if self.leader and self.up:
                await self._release(keys=[self.key("lease")], args=[self._token])
        except ERRORS:
            pass  # the lease expires on its own
        await self.client.aclose()

    def summary(self) -> SharedView:
        """For GET /admin/state (no URL: it may hold a password)."""
        return SharedView(
            backend="redis",
            up=self.up,
            instance=self.instance,
            key_prefix=self.prefix,
            canary_leader=self.leader,
            lease_holder=self.holder,
            fallbacks=self.fallbacks,
            last_error=self.last_error,
        )
