"""The live objects behind a configuration: backends with their pools and breakers, routes, clients.

A `Runtime` is built from one validated config and never changed in place; a reload builds a new
one (reusing backends and canaries whose settings did not change) and requests that started on the
old one finish on it.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from tokenrace import __version__
from tokenrace.gateway import clock, routing
from tokenrace.gateway.breaker import Breaker
from tokenrace.gateway.canary import Canary
from tokenrace.gateway.config import (
    SCRAPED_POLICIES,
    AffinityConfig,
    BackendConfig,
    ConfigError,
    GatewayConfig,
    Policy,
    RateLimitConfig,
    RetryConfig,
    RouteConfig,
    Secret,
    Secrets,
    ShadowConfig,
    TargetConfig,
    sha256_hex,
)
from tokenrace.gateway.headers import RequestFilter
from tokenrace.gateway.kvblocks import InstanceBlocks, chain_keys
from tokenrace.gateway.prompt_tokens import PromptTokenizer, TokenizerError
from tokenrace.gateway.ratelimit import TokenBucket
from tokenrace.gateway.routing import Load
from tokenrace.gateway.upstream import Pool, Upstream, proxy_for
from tokenrace.gateway.views import AffinityView, ModelEntry, ModelList, RoutingView, TargetView

ArmName = Literal["baseline", "canary", "fallback"]
STALE_INTERVALS = 3  # a /metrics reading older than this many scrape intervals is not used
PATHS = {"chat": "/chat/completions", "completions": "/completions"}
DEFAULT_FORWARD = RequestFilter()  # every end-to-end header (headers.py)


class Backend:
    """One upstream deployment: its keep-alive pool, key, breaker and in-flight count."""

    def __init__(self, name: str, config: BackendConfig, secret: Secret | None) -> None:
        self.name = name
        self.config = config
        self.secret = secret
        self.breaker = Breaker(name, config.breaker)
        self.in_flight = 0
        self.load: Load | None = None  # the latest /metrics reading, when a least_queue or scored pool scrapes it
        # The blocks the engine holds, from its KV events (kv_events: in the config; kvevents.py).
        self.kv: InstanceBlocks | None = InstanceBlocks() if config.kv_events is not None else None
        self.pool: Upstream | None = None
        self.heads: dict[str, bytes] = {}
        self.own_names = frozenset(k.lower() for k in config.headers)  # a client's header of these names is not sent
        base = {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": f"tokenrace-gateway/{__version__}",
            **config.headers,
        }
        if secret is not None:
            # The key goes only into this backend's own headers; nothing else ever sees it.
            base["Authorization"] = f"Bearer {secret.reveal()}"
        self.headers = base

    def same_as(self, other: Backend) -> bool:
        """Whether `other` can be replaced by this one without a new pool (a reload kept it)."""
        same_key = (self.secret is None) == (other.secret is None) and (
            self.secret is None
            or other.secret is None
            or hmac.compare_digest(self.secret.reveal(), other.secret.reveal())
        )
        return self.config == other.config and same_key

    def open(self, env: Mapping[str, str]) -> None:
        """Start the pool; `env` says which proxy, if any, the backend is reached through."""
        self.attach(
            Pool(
                self.config.url,
                self.config.timeouts.connect_s,
                self.config.max_in_flight,
                ca_bundle=self.config.ca_bundle,
                proxy=proxy_for(self.config.url, env),
            )
        )

    def attach(self, upstream: Upstream) -> None:
        """Send this backend's requests through `upstream` (open() attaches a Pool; tests, others)."""
        self.pool = upstream
        self.heads = {name: upstream.head(path, self.headers) for name, path in PATHS.items()}

    async def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def model_for(self, public: str) -> str:
        return self.config.models.get(public, public)

    def unavailable(self, now: float) -> str | None:
        """Why this backend cannot take a request now (None: it can). Admits half-open probes."""
        if self.in_flight >= self.config.max_in_flight:
            return "saturated"
        if not self.breaker.allow(now):
            return "breaker_open"
        return None

    def metrics_url(self) -> str:
        """The engine's Prometheus endpoint: configured, or the backend URL's origin + /metrics."""
        if self.config.metrics.url is not None:
            return self.config.metrics.url
        scheme, _, rest = self.config.url.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}/metrics"

    def public_url(self) -> str:
        """The base URL without credentials or query, fit for /admin/state."""
        return public(self.config.url)


def public(url: str) -> str:
    """A URL without credentials or query."""
    scheme, _, rest = url.partition("://")
    host_path = rest.split("?", 1)[0]
    return f"{scheme}://{host_path.rsplit('@', 1)[-1]}"


class KeySource(Protocol):
    """What a pool asks of a request: its key for `prefix_affinity` (see routing.affinity_key), its
    prompt's token ids for `scored` (None: none to match)."""

    def affinity_key(self, header: str | None, prefix_chars: int) -> str | None: ...

    def prompt_tokens(self, tokenizer: PromptTokenizer) -> list[int] | None: ...


class Target:
    """A share of a route: one backend, or a pool of equal instances chosen by its policy."""

    __slots__ = (
        "backends",
        "weight",
        "config",
        "policy",
        "affinity",
        "ring",
        "placements",
        "peak",
        "on_move",
        "decisions",
        "rng",
        "weights",
        "tokenizer",
    )

    def __init__(
        self,
        backends: list[Backend],
        weight: float,
        config: TargetConfig | None = None,
        on_move: Callable[[str, str], None] | None = None,
    ) -> None:
        self.backends = backends
        self.weight = weight
        self.config = config
        self.policy: Policy = config.policy if config is not None else "least_in_flight"
        self.affinity: AffinityConfig | None = None
        if config is not None and config.policy == "prefix_affinity":
            self.affinity = config.affinity or AffinityConfig()
        self.ring = routing.HashRing([b.name for b in backends]) if self.affinity is not None else None
        self.placements = routing.Placements() if self.affinity is not None else None
        self.peak = routing.RecentPeak()
        self.on_move = on_move  # (from, to): a key's request went to another instance than its last one
        self.decisions = routing.Decisions()
        self.rng = random.Random()
        self.weights: routing.Weights | None = None
        self.tokenizer: PromptTokenizer | None = None
        if config is not None and config.policy == "scored":
            self.weights = routing.Weights(**(config.scorers.model_dump() if config.scorers is not None else {}))
            try:
                self.tokenizer = PromptTokenizer(config.tokenizer) if config.tokenizer is not None else None
            except TokenizerError as exc:
                raise ConfigError([f"routes: tokenizer: {exc}"]) from None

    def pick(self, tried: set[str], now: float, request: KeySource | None = None) -> tuple[Backend | None, str | None]:
        """The instance to try (untried before tried), by the pool's policy; and why none could be."""
        if len(self.backends) == 1:
            only = self.backends[0]
            why = only.unavailable(now)
            return (only, None) if why is None else (None, why)
        if self.policy == "least_in_flight":
            return self._least_in_flight(tried, now)
        available: list[Backend] = []
        reasons: list[str] = []
        for backend in self.backends:
            why = backend.unavailable(now)
            if why is None:
                available.append(backend)
            else:
                reasons.append(why)
        if not available:
            return None, reasons[0] if reasons else "no backend"
        choice = self._choose(available, tried, now, request)
        return next(b for b in available if b.name == choice.name), None

    def _least_in_flight(self, tried: set[str], now: float) -> tuple[Backend | None, str | None]:
        """routing.least_in_flight, inlined: the default policy keeps the request path as short as it was."""
        draw = self.rng.random
        reasons: list[str] = []
        for backend in sorted(self.backends, key=lambda b: (b.name in tried, b.in_flight, draw())):
            why = backend.unavailable(now)
            if why is None:
                self.decisions.record(backend.name, "least_in_flight")
                return backend, None
            reasons.append(why)
        return None, reasons[0] if reasons else "no backend"

    def _choose(
        self, available: list[Backend], tried: set[str], now: float, request: KeySource | None
    ) -> routing.Choice:
        """The policy's choice among `available`, recorded with its inputs for /admin/state."""
        candidates = [
            routing.Candidate(
                b.name, b.in_flight, b.name in tried, b.load, STALE_INTERVALS * b.config.metrics.interval_s
            )
            for b in available
        ]
        if self.policy == "least_queue":
            choice = routing.least_queue(candidates, now, self.rng)
            queue = {c.name: routing.queue_estimate(c) for c in candidates}
            self.decisions.record(choice.name, choice.reason, choice.detail, queue=queue)
            return choice
        if self.weights is not None:
            keys = self._prefix_keys(request)
            if keys:
                by_name = {b.name: b for b in available}
                candidates = [
                    replace(c, prefix_blocks=kv.prefix(keys)) if (kv := by_name[c.name].kv) is not None else c
                    for c in candidates
                ]
            choice, scores = routing.scored(candidates, now, self.weights, len(keys), self.rng)
            self.decisions.record(choice.name, choice.reason, choice.detail, queue=dict(scores))
            return choice
        if self.affinity is not None and self.ring is not None:
            a = self.affinity
            key = request.affinity_key(a.header, a.prefix_chars) if request is not None else None
            point = routing.hash64(key) if key is not None else None
            recent = self.peak.update(sum(c.in_flight for c in candidates) + 1, now)
            choice = routing.bounded_load(
                self.ring, point, candidates, a.load_factor, self.rng, self.placements, recent
            )
            if choice.moved_from is not None and self.on_move is not None:
                self.on_move(choice.moved_from, choice.name)
            self.decisions.record(choice.name, choice.reason, choice.detail, point=point)
            return choice
        choice = routing.least_in_flight(candidates, self.rng)
        self.decisions.record(choice.name, choice.reason, choice.detail)
        return choice

    def tokenizes(self) -> PromptTokenizer | None:
        """The tokenizer a request's prompt needs before this pool chooses (None: it needs none):
        a scored pool with a tokenizer, once an instance's events said the block size."""
        if self.tokenizer is None or not any(b.kv is not None and b.kv.block_size for b in self.backends):
            return None
        return self.tokenizer

    def _prefix_keys(self, request: KeySource | None) -> list[int]:
        """The chain keys of the request's whole blocks (kvblocks), in the engines' block size."""
        if self.tokenizer is None or request is None:
            return []
        size = next((b.kv.block_size for b in self.backends if b.kv is not None and b.kv.block_size), None)
        tokens = request.prompt_tokens(self.tokenizer) if size is not None else None
        return chain_keys(tokens, size) if tokens and size is not None else []

    def routing_state(self) -> RoutingView:
        """The policy and its inputs per instance, for /admin/state."""
        out = self.decisions.snapshot(self.policy)
        if self.affinity is not None and self.ring is not None:
            a = self.affinity
            out.affinity = AffinityView(header=a.header, prefix_chars=a.prefix_chars, load_factor=a.load_factor)
            out.ring_share = self.ring.shares()
            out.moved = sum(n for (_, reason), n in self.decisions.counts.items() if reason == "moved")
            # Undefined (null), not 0, for a pool that keeps no placements: 0 means it remembers none yet.
            out.keys_remembered = len(self.placements) if self.placements is not None else None
        if self.weights is not None:
            w = self.weights
            out.scorers = {"prefix": w.prefix, "queue": w.queue, "running": w.running, "kv_cache": w.kv_cache}
            out.tokenizer = self.tokenizer.path if self.tokenizer is not None else None
        if self.policy in SCRAPED_POLICIES:
            out.queue_estimate = {
                b.name: routing.queue_estimate(routing.Candidate(b.name, b.in_flight, load=b.load))
                for b in self.backends
            }
        return out

    @property
    def label(self) -> str:
        return "+".join(b.name for b in self.backends)


@dataclass(frozen=True, slots=True)
class ShadowResult:
    """One shadow copy's outcome, and its answer's agreement with the primary's (None: no text to compare)."""

    t: float  # wall clock
    outcome: str
    ttft_s: float | None
    duration_s: float | None
    agreement: float | None
    exact_match: bool | None


@dataclass(slots=True)
class Shadow:
    backend: Backend
    config: ShadowConfig
    in_flight: int = 0
    recent: deque[ShadowResult] = field(default_factory=lambda: deque(maxlen=1000))


class Route:
    """A public model name, its weighted targets, fallbacks, canary and shadow."""

    def __init__(
        self,
        config: RouteConfig,
        backends: dict[str, Backend],
        retry: RetryConfig,
        canary: Canary | None,
        on_move: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.name = config.model
        self.config = config
        self.retry = config.retry or retry
        moved = None if on_move is None else lambda old, new: on_move(self.name, old, new)
        self.targets = [
            Target([backends[n] for n in t.names], t.weight, t, moved) for t in config.backends if t.weight > 0
        ]
        self.cumulative = _cumulative([t.weight for t in self.targets])
        self.canary = canary
        self.canary_target = (
            Target([backends[n] for n in config.canary.names], 1.0) if config.canary is not None else None
        )
        self.fallback = self._fallback(config, backends)
        self.shadow = Shadow(backends[config.shadow.backend], config.shadow) if config.shadow is not None else None
        self.sticky_header = config.sticky_header
        self.pin_header = config.pin_header.lower() if config.pin_header else None
        self.own_headers = frozenset((self.pin_header,)) if self.pin_header else frozenset()  # read here, not forwarded
        # The targets a pin may name: every backend the route uses, each alone.
        named = [n for t in config.backends for n in t.names] + (config.fallback or [])
        named += config.canary.names if config.canary is not None else []
        self.pins = {n: Target([backends[n]], 1.0) for n in dict.fromkeys(named)} if self.pin_header else {}
        fh = config.forward_headers
        self.forward = RequestFilter(fh.allow, fh.deny) if fh is not None else DEFAULT_FORWARD

    def _fallback(self, config: RouteConfig, backends: dict[str, Backend]) -> list[Target]:
        if config.fallback is not None:
            return [Target([backends[n]], 1.0) for n in config.fallback]
        # Default: the route's other targets, heaviest first (the chosen one is skipped in plan()).
        return sorted(self.targets, key=lambda t: -t.weight)

    def point(self, sticky: str | None) -> float:
        """Where in [0, 1) this request falls: a hash of the sticky header pins a user; else random."""
        if sticky is None:
            return random.random()
        digest = hashlib.blake2b(f"{self.name}\x00{sticky}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def plan(self, u: float) -> list[tuple[Target, ArmName]]:
        """The targets to try in order: the chosen one, then the fallbacks.

        The canary takes the lowest `weight` share of [0, 1), so as it widens a pinned user who
        was on it stays on it. A request the canary fails falls back to the baseline first.
        """
        canary_share = self.canary.weight / 100.0 if self.canary is not None else 0.0
        chain: list[tuple[Target, ArmName]] = []
        if self.canary_target is not None and u < canary_share:
            chain.append((self.canary_target, "canary"))
            v = (u / canary_share) if canary_share > 0 else u
        else:
            v = (u - canary_share) / (1.0 - canary_share) if canary_share < 1.0 else u
        chosen = self.targets[min(bisect.bisect_right(self.cumulative, v), len(self.targets) - 1)]
        chain.append((chosen, "fallback" if chain else "baseline"))
        for target in self.fallback:
            if all(target is not t for t, _ in chain):
                chain.append((target, "fallback"))
        return chain

    def shares(self) -> list[TargetView]:
        """Each target's current share of traffic (canary included), for /admin/state."""
        canary_share = self.canary.weight / 100.0 if self.canary is not None else 0.0
        total = sum(t.weight for t in self.targets)
        out = []
        for t in self.targets:
            view = TargetView(
                backends=[b.name for b in t.backends],
                weight=t.weight,
                share=round((1 - canary_share) * t.weight / total, 6),
            )
            if len(t.backends) > 1:
                view.routing = t.routing_state()
            out.append(view)
        if self.canary_target is not None:
            names = [b.name for b in self.canary_target.backends]
            out.append(TargetView(backends=names, canary=True, share=round(canary_share, 6)))
        return out


def _cumulative(weights: list[float]) -> list[float]:
    total = sum(weights)
    out, acc = [], 0.0
    for w in weights:
        acc += w / total
        out.append(acc)
    out[-1] = 1.0
    return out


class ClientAuth:
    """Client keys (looked up by SHA-256 digest) and their rate limits."""

    ANONYMOUS = "anonymous"

    def __init__(self, config: GatewayConfig, secrets: Secrets, now: float) -> None:
        self.required = config.auth.required
        self._digests = dict(secrets.client_digests)
        self._admin = secrets.admin_digest
        self._seen: dict[str, str] = {}  # presented valid key -> name; only valid keys, so it stays small
        limits: dict[str, RateLimitConfig | None] = {
            k.name: k.rate_limit or config.auth.rate_limit for k in config.auth.keys
        }
        limits[self.ANONYMOUS] = config.auth.rate_limit
        self._buckets = {name: TokenBucket(lim, now) for name, lim in limits.items() if lim is not None}

    def identify(self, authorization: str | None) -> str | None:
        """The client's key name; ANONYMOUS when keys are optional and none was given; None = refuse."""
        key = _bearer(authorization)
        if key is None:
            return None if self.required else self.ANONYMOUS
        name = self._seen.get(key)
        if name is not None:
            return name
        name = self._digests.get(sha256_hex(key))
        if name is not None:
            self._seen[key] = name
            return name
        return None

    def throttle(self, client: str, now: float) -> float | None:
        """None if the client may go on; else seconds until it may."""
        bucket = self._buckets.get(client)
        return bucket.take(now) if bucket is not None else None

    def bucket(self, client: str) -> TokenBucket | None:
        """The client's local bucket (its rate and capacity), None without a limit."""
        return self._buckets.get(client)

    def is_admin(self, authorization: str | None) -> bool:
        key = _bearer(authorization)
        if key is None or self._admin is None:
            return False
        return hmac.compare_digest(sha256_hex(key), self._admin)

    @property
    def admin_configured(self) -> bool:
        return self._admin is not None


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return key.strip()


class Runtime:
    """Everything one configuration needs at run time."""

    def __init__(
        self,
        config: GatewayConfig,
        secrets: Secrets,
        generation: int,
        previous: Runtime | None = None,
        on_move: Callable[[str, str, str], None] | None = None,
    ) -> None:
        """`on_move(route, from, to)`: a prefix_affinity pool sent a key to another instance."""
        now = clock.monotonic()
        self.config = config
        self.secrets = secrets
        self.generation = generation
        self.loaded_unix = time.time()
        self.backends = self._backends(config, secrets, previous)
        self.routes: dict[str, Route] = {}
        for rc in config.routes:
            canary = _kept_canary(rc, previous, now)
            self.routes[rc.model] = Route(rc, self.backends, config.retry, canary, on_move)
        self.auth = ClientAuth(config, secrets, now)
        # Backends of least_queue and scored pools: their /metrics is read in the background (scrape.py).
        self.scraped = list(
            {
                id(b): b
                for r in self.routes.values()
                for t in r.targets
                if t.policy in SCRAPED_POLICIES
                for b in t.backends
            }.values()
        )
        # Backends whose engines publish KV events: followed in the background (kvevents.py).
        self.kv_followed = [b for b in self.backends.values() if b.kv is not None]
        self.models = ModelList(
            object="list",
            data=[ModelEntry(id=m, object="model", created=0, owned_by="tokenrace-gateway") for m in self.routes],
        )

    @staticmethod
    def _backends(config: GatewayConfig, secrets: Secrets, previous: Runtime | None) -> dict[str, Backend]:
        out: dict[str, Backend] = {}
        for name, bc in config.backends.items():
            fresh = Backend(name, bc, secrets.upstream.get(name))
            old = previous.backends.get(name) if previous is not None else None
            out[name] = old if old is not None and fresh.same_as(old) else fresh
        return out

    def new_backends(self, previous: Runtime | None) -> list[Backend]:
        old = set(map(id, previous.backends.values())) if previous is not None else set()
        return [b for b in self.backends.values() if id(b) not in old]

    def retired_backends(self, previous: Runtime) -> list[Backend]:
        kept = set(map(id, self.backends.values()))
        return [b for b in previous.backends.values() if id(b) not in kept]


def _kept_canary(rc: RouteConfig, previous: Runtime | None, now: float) -> Canary | None:
    if rc.canary is None:
        return None
    old = previous.routes.get(rc.model) if previous is not None else None
    if (
        old is not None
        and old.canary is not None
        and old.config.canary == rc.canary
        and old.config.backends == rc.backends
    ):
        return old.canary  # same canary, same baseline: the ramp goes on where it was
    return Canary(rc.model, rc.canary, now)
