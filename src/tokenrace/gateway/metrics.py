"""Prometheus metrics of the gateway (one registry per gateway, so tests can run several).

Labels are route (the public model name), backend (the configured name), status, and for client
accounting the *name* of the client key; never a key, never a URL. Label children are resolved once
per (route, backend) and cached, so the per-request cost is a few attribute lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

P = "tokenrace_gateway_"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
OVERHEAD_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025)
AGREEMENT_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        rb = ["route", "backend"]
        self.requests = Counter(
            P + "requests",
            "Client requests answered, by final HTTP status (backend 'none': the gateway answered)",
            [*rb, "status"],
            registry=r,
        )
        self.attempts = Counter(
            P + "upstream_attempts", "Requests sent to a backend, by outcome", [*rb, "outcome"], registry=r
        )
        self.retries = Counter(P + "retries", "Attempts that were retries on the same backend", rb, registry=r)
        self.fallbacks = Counter(
            P + "fallbacks",
            "Moves to the next backend after one failed or was unavailable",
            ["route", "from_backend", "to_backend"],
            registry=r,
        )
        self.stream_errors = Counter(
            P + "stream_errors",
            "Streams that broke after bytes reached the client (ended with an error event)",
            [*rb, "kind"],
            registry=r,
        )
        self.client_disconnects = Counter(
            P + "client_disconnects", "Clients that left before their response ended", rb, registry=r
        )
        self.ttft = Histogram(
            P + "ttft_seconds",
            "Time to first token: request received to first content chunk from the backend",
            rb,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            P + "tpot_seconds",
            "Time per output token after the first, per stream",
            rb,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            P + "request_duration_seconds", "Request received to response end", rb, buckets=LATENCY_BUCKETS, registry=r
        )
        self.tokens = Counter(
            P + "tokens",
            "Tokens by direction (in = prompt, out = completion) and source (usage or counted chunks)",
            [*rb, "direction", "source"],
            registry=r,
        )
        # Gauges that mirror live state are read at scrape time (StateCollector): no lock per request.
        self.in_flight: dict[tuple[str, str], int] = {}
        self.breaker_transitions = Counter(
            P + "breaker_transitions", "Breaker state changes", ["backend", "to"], registry=r
        )
        self.affinity_moves = Counter(
            P + "affinity_moves",
            "prefix_affinity: requests sent to another instance than their key's previous request",
            ["route", "from_backend", "to_backend"],
            registry=r,
        )
        self.canary_decisions = Counter(P + "canary_decisions", "Canary decisions", ["route", "action"], registry=r)
        self.overhead = Histogram(
            P + "overhead_seconds",
            "The gateway's own processing: request (handler start -> request written upstream), first_chunk (first "
            "upstream bytes read -> written to the client), chunk (the same for every 8th later chunk, sampled)",
            ["phase"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.state_fallbacks = Counter(
            P + "state_fallbacks",
            "Times this instance lost the shared state backend (Redis) and went on with local state",
            registry=r,
        )
        self.rejected = Counter(
            P + "client_rejections", "Requests refused before routing, by reason", ["reason"], registry=r
        )
        self.client_requests = Counter(P + "client_requests", "Requests by client key name", ["client"], registry=r)
        self.shadow_requests = Counter(P + "shadow_requests", "Shadow copies, by outcome", [*rb, "outcome"], registry=r)
        self.shadow_ttft = Histogram(
            P + "shadow_ttft_seconds", "TTFT of shadow copies", rb, buckets=LATENCY_BUCKETS, registry=r
        )
        self.shadow_duration = Histogram(
            P + "shadow_duration_seconds", "Duration of shadow copies", rb, buckets=LATENCY_BUCKETS, registry=r
        )
        self.shadow_agreement = Histogram(
            P + "shadow_agreement",
            "Output agreement of shadow vs primary (token-level similarity, 0..1)",
            rb,
            buckets=AGREEMENT_BUCKETS,
            registry=r,
        )
        self._pairs: dict[tuple[str, str], RouteBackend] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.request_overhead = self.overhead.labels("request")
        self.first_chunk_overhead = self.overhead.labels("first_chunk")
        self.chunk_overhead = self.overhead.labels("chunk")

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """metric.labels(*labels), cached: labels() costs microseconds, a dict lookup does not."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def affinity_moved(self, route: str, old: str, new: str) -> None:
        self.child(self.affinity_moves, route, old, new).inc()

    def watch(self, state: Callable[[], StateSnapshot]) -> None:
        """Export live state (in flight, breakers, canary weights) read at scrape time."""
        self.registry.register(StateCollector(state, self.in_flight))

    def pair(self, route: str, backend: str) -> RouteBackend:
        """The label children of one (route, backend), created on first use."""
        key = (route, backend)
        found = self._pairs.get(key)
        if found is None:
            found = self._pairs[key] = RouteBackend(
                ttft=self.ttft.labels(route, backend),
                tpot=self.tpot.labels(route, backend),
                duration=self.duration.labels(route, backend),
                retries=self.retries.labels(route, backend),
            )
        return found


@dataclass(frozen=True, slots=True)
class RouteBackend:
    ttft: Any
    tpot: Any
    duration: Any
    retries: Any


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    breakers: dict[str, tuple[int, float]]  # backend -> (state code, open-until unix or 0)
    canary_weights: dict[tuple[str, str], float]  # (route, canary backend) -> percent
    state_up: float | None = None  # shared state backend answering (1/0); None: state kept in memory
    leader: float | None = None  # this instance holds the canary decision lease (1/0)


class StateCollector(Collector):
    def __init__(self, state: Callable[[], StateSnapshot], in_flight: dict[tuple[str, str], int]) -> None:
        self._state = state
        self._in_flight = in_flight

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self._state()
        flight = GaugeMetricFamily(
            P + "in_flight", "Requests in flight, per route and backend", labels=["route", "backend"]
        )
        for (route, backend), n in sorted(self._in_flight.items()):
            flight.add_metric([route, backend], n)
        state = GaugeMetricFamily(
            P + "breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open", labels=["backend"]
        )
        until = GaugeMetricFamily(
            P + "breaker_open_until_seconds",
            "Unix time an open breaker will half-open (0 when not open)",
            labels=["backend"],
        )
        for backend, (code, open_until) in sorted(snap.breakers.items()):
            state.add_metric([backend], code)
            until.add_metric([backend], open_until)
        weight = GaugeMetricFamily(
            P + "canary_weight_percent", "Share of the route's traffic sent to its canary", labels=["route", "backend"]
        )
        for (route, backend), pct in sorted(snap.canary_weights.items()):
            weight.add_metric([route, backend], pct)
        yield from (flight, state, until, weight)
        if snap.state_up is not None:
            yield GaugeMetricFamily(
                P + "state_backend_up",
                "Shared state backend (Redis) answering: 1 up, 0 down (local state)",
                snap.state_up,
            )
        if snap.leader is not None:
            yield GaugeMetricFamily(
                P + "state_leader", "This instance holds the canary decision lease: 1 yes, 0 no", snap.leader
            )
