"""How a pool of equal instances chooses one for a request. Pure: no I/O, no clock, no globals.

Three policies (`policy:` on a pool):

- `least_in_flight`: the instance with the fewest requests the gateway has in flight on it. It knows
  nothing of what the engine itself is doing (other clients, long prompts, a full KV cache).
- `least_queue`: the engines' own figures, scraped from each instance's Prometheus /metrics in the
  background (`Load`): the requests waiting for a slot, then the KV-cache use. The gateway's own
  requests sent since the scrape count as waiting too, so one scrape interval does not send every
  request to the same instance. Any instance without a fresh reading makes the whole choice fall
  back to in-flight (comparing scraped and unscraped instances would be comparing two units), and
  the reason says which instance and why.
- `scored`: llm-d's way: each instance gets a weighted sum of scores in [0, 1] and the highest
  wins. `queue` (fewest waiting, min-max scaled over the pool), `running` (fewest running, the
  same), `kv_cache` (1 - KV-cache use): the three gauges the Gateway API Inference Extension
  requires of a model server, scraped as for `least_queue`; and `prefix` (the share of the
  request's whole blocks the instance holds, learned from the engine's KV events, `kvblocks`).
  While any instance has no usable reading the three load scores are left out (all instances
  alike), and the detail says which instance and why.
- `prefix_affinity`: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
  "Consistent Hashing with Bounded Loads", 2018). A request's key (the session header, else the
  first characters of its prompt) hashes to a point on a ring of virtual nodes (blake2b: the same
  ring for the same instance names in every process). Its home is the first instance clockwise;
  the capacity is `ceil(load_factor * (requests in flight on the pool + 1) / instances)`, the new
  request counted. With hysteresis: a key leaves its home only while the home is *clearly* over
  the capacity, its share of the pool's requests in flight above `load_factor / instances` with
  three standard errors to spare (Wilson's lower bound, `LEAVE_Z`), counted against the pool's
  recent peak load (`RecentPeak`) when it is higher, so that the chance order in which a handful
  of requests arrive, the gap between two turns of a conversation, or the end of a burst, moves
  no one. A key that left goes to the first instance clockwise under the capacity, stays there while
  its home is at or over the capacity, and goes home once it is under it. `Placements` remembers
  where each key went last, so that a change of instance is counted (`moved`).

Peers: SGLang's router `cache_aware` keeps an approximate radix tree of what it sent where and
switches to shortest queue when loads are imbalanced; llm-d scores instances by queue depth,
KV-cache use and prefix-cache hits; vLLM production-stack has `session` (a hash ring over a session
header) and `prefixaware` (a trie of prompt chunks). A ring over the key is the one that keeps no
per-prompt state and agrees across gateway instances without sharing any.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tokenrace.engines import ENGINES
from tokenrace.gateway.body import RequestBody
from tokenrace.gateway.views import LastChoice, RoutingView
from tokenrace.stats import wilson

VNODES = 160  # points per instance on the ring (ketama's figure): arcs within a few % of equal
LEAVE_Z = 3.0  # standard errors by which a home's share must exceed its bound before a key leaves
PEAK_HALF_LIFE_S = 10.0  # how fast the pool's recent peak load is forgotten (RecentPeak)
PLACEMENTS = 65_536  # keys whose last instance is remembered (least recently seen forgotten first)

# Queue and KV-cache gauges by engine, from the engines catalog. All KV figures are fractions in
# [0, 1] (vLLM's "_perc" too).
WAITING = {name: e.name for e in ENGINES.values() if e.metrics for name in e.metrics.gauges.get("waiting", ())}
RUNNING = frozenset(name for e in ENGINES.values() if e.metrics for name in e.metrics.gauges.get("running", ()))
KV_USAGE = frozenset(name for e in ENGINES.values() if e.metrics for name in e.metrics.gauges.get("kv_cache_usage", ()))


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    """One scrape of an instance's /metrics. `error` set: the scrape failed and the figures are None.

    `at` is the monotonic time the answer came; `in_flight_at` the gateway's in-flight count on the
    instance then (requests sent after it are not in `waiting` yet).
    """

    at: float
    in_flight_at: int
    waiting: float | None = None
    kv_usage: float | None = None
    engine: str | None = None
    error: str | None = None
    running: float | None = None

    def problem(self, now: float, stale_s: float) -> str | None:
        """Why this reading cannot be used now (None: it can)."""
        if self.error is not None:
            return f"scrape failed ({self.error})"
        if self.waiting is None:
            return "no queue gauge in /metrics"
        age = now - self.at
        if age > stale_s:
            return f"reading {age:.1f} s old"
        return None


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance the pool may choose: it is available now (breaker, capacity) and not yet failed."""

    name: str
    in_flight: int
    tried: bool = False
    load: Load | None = None
    stale_s: float = math.inf  # a reading older than this is not used
    prefix_blocks: int = 0  # `scored`: the request's leading whole blocks this instance holds


@dataclass(frozen=True, slots=True)
class Choice:
    name: str
    reason: str
    detail: str | None = None  # e.g. the instance and cause of a fallback to in-flight
    moved_from: str | None = None  # prefix_affinity: the instance the key's previous request went to


def parse_load(text: str, at: float, in_flight_at: int) -> Load:
    """The queue and KV-cache gauges of one /metrics text (summed over label sets; KV: the fullest).

    A text that does not parse, or has no queue gauge, is a Load with `error`/no `waiting`.
    """
    waiting: dict[str, float] = {}
    running: float | None = None
    kv: list[float] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                engine = WAITING.get(sample.name)
                if engine is not None:
                    waiting[engine] = waiting.get(engine, 0.0) + float(sample.value)
                elif sample.name in RUNNING and math.isfinite(sample.value):
                    running = (running or 0.0) + float(sample.value)
                elif sample.name in KV_USAGE and math.isfinite(sample.value):
                    kv.append(float(sample.value))
    except ValueError as exc:
        return Load(at, in_flight_at, error=f"unparseable /metrics: {str(exc)[:120]}")
    if not waiting:
        return Load(at, in_flight_at, kv_usage=max(kv) if kv else None, running=running)
    engine = next(iter(waiting))
    return Load(at, in_flight_at, waiting[engine], max(kv) if kv else None, engine, running=running)


# --- the policies ---------------------------------------------------------------------------------


def least_in_flight(candidates: Sequence[Candidate], rng: random.Random, reason: str = "least_in_flight") -> Choice:
    """Untried before tried, then fewest in flight; ties broken at random."""
    best = min(candidates, key=lambda c: (c.tried, c.in_flight, rng.random()))
    return Choice(best.name, reason)


def least_queue(candidates: Sequence[Candidate], now: float, rng: random.Random) -> Choice:
    """Fewest waiting (scraped, plus what the gateway sent since), then the emptier KV cache."""
    for c in candidates:
        problem = "no reading yet" if c.load is None else c.load.problem(now, c.stale_s)
        if problem is not None:
            chosen = least_in_flight(candidates, rng, "in_flight_fallback")
            return Choice(chosen.name, chosen.reason, f"{c.name}: {problem}")
    return Choice(min(candidates, key=lambda c: _queue_key(c, rng)).name, "least_queue")


def queue_estimate(c: Candidate) -> float | None:
    """Waiting requests now: the scraped figure plus the gateway's requests sent since the scrape."""
    if c.load is None or c.load.waiting is None:
        return None
    return c.load.waiting + max(0, c.in_flight - c.load.in_flight_at)


def _queue_key(c: Candidate, rng: random.Random) -> tuple[bool, float, float, int, float]:
    assert c.load is not None
    return (c.tried, queue_estimate(c) or 0.0, c.load.kv_usage or 0.0, c.in_flight, rng.random())


@dataclass(frozen=True, slots=True)
class Weights:
    """`scored`: how much each score counts (0: not at all)."""

    prefix: float = 2.0
    queue: float = 1.0
    running: float = 0.0
    kv_cache: float = 1.0


def scored(
    candidates: Sequence[Candidate], now: float, weights: Weights, blocks: int, rng: random.Random
) -> tuple[Choice, dict[str, float]]:
    """The highest weighted sum of the instance's scores (ties: fewest in flight, then at random),
    and every instance's score.

    `blocks`: the request's whole blocks (0: no prefix score). The choice's detail names the load
    problem that left the load scores out, else the winner's prefix.
    """
    scores, problem = score(candidates, now, weights, blocks)
    best = min(candidates, key=lambda c: (c.tried, -scores[c.name], c.in_flight, rng.random()))
    detail = f"prefix {best.prefix_blocks}/{blocks} blocks"
    if problem is not None:
        detail += f"; load scores off: {problem}"
    return Choice(best.name, "scored", detail), {n: round(v, 4) for n, v in scores.items()}


def score(
    candidates: Sequence[Candidate], now: float, weights: Weights, blocks: int
) -> tuple[dict[str, float], str | None]:
    """Each instance's weighted score, and why the load scores were left out (None: they were not)."""
    out = {c.name: weights.prefix * (c.prefix_blocks / blocks if blocks else 0.0) for c in candidates}
    if not (weights.queue or weights.running or weights.kv_cache):
        return out, None
    for c in candidates:
        problem = "no reading yet" if c.load is None else c.load.problem(now, c.stale_s)
        if problem is not None:
            return out, f"{c.name}: {problem}"
    queue = _scaled({c.name: queue_estimate(c) or 0.0 for c in candidates})
    running = _scaled({c.name: (c.load.running or 0.0) if c.load else 0.0 for c in candidates})
    for c in candidates:
        kv = c.load.kv_usage if c.load is not None else None
        out[c.name] += weights.queue * queue[c.name] + weights.running * running[c.name]
        out[c.name] += weights.kv_cache * (1.0 - min(1.0, kv)) if kv is not None else 0.0
    return out, None


def _scaled(values: dict[str, float]) -> dict[str, float]:
    """Min-max scaled so that the fewest is 1 and the most 0 (all 1 when they are equal), as llm-d's
    queue scorer does."""
    low, high = min(values.values()), max(values.values())
    if high <= low:
        return dict.fromkeys(values, 1.0)
    return {name: (high - v) / (high - low) for name, v in values.items()}


class HashRing:
    """`VNODES` points per instance on a 64-bit ring; `walk(point)` lists instances clockwise."""

    def __init__(self, names: Sequence[str], vnodes: int = VNODES) -> None:
        points = sorted((hash64(f"{name}#{i}"), name) for name in names for i in range(vnodes))
        self.points = [p for p, _ in points]
        self.owners = [n for _, n in points]
        self.names = list(dict.fromkeys(names))

    def walk(self, point: int) -> Iterator[str]:
        """Each instance once, in the order met going clockwise from `point`."""
        seen: set[str] = set()
        start = bisect.bisect_left(self.points, point)
        size = len(self.points)
        for i in range(size):
            name = self.owners[(start + i) % size]
            if name not in seen:
                seen.add(name)
                yield name
                if len(seen) == len(self.names):
                    return

    def shares(self) -> dict[str, float]:
        """The fraction of the ring (of all keys) each instance is home to."""
        out = dict.fromkeys(self.names, 0.0)
        for i, point in enumerate(self.points):
            # A point owns the arc from the previous point (exclusive) to itself.
            prev = self.points[i - 1] if i > 0 else self.points[-1] - 2**64
            out[self.owners[i]] += (point - prev) / 2**64
        return {n: round(v, 4) for n, v in out.items()}


class Placements:
    """Where each key's last request went (by its ring point), the least recently seen forgotten."""

    __slots__ = ("_last", "limit")

    def __init__(self, limit: int = PLACEMENTS) -> None:
        self._last: OrderedDict[int, str] = OrderedDict()
        self.limit = limit

    def get(self, point: int) -> str | None:
        return self._last.get(point)

    def put(self, point: int, name: str) -> None:
        self._last[point] = name
        self._last.move_to_end(point)
        if len(self._last) > self.limit:
            self._last.popitem(last=False)

    def __len__(self) -> int:
        return len(self._last)


class RecentPeak:
    """The most requests a pool had in flight lately: the peak, halving every `half_life_s`."""

    __slots__ = ("value", "at", "half_life_s")

    def __init__(self, half_life_s: float = PEAK_HALF_LIFE_S) -> None:
        self.value = 0.0
        self.at = 0.0
        self.half_life_s = half_life_s

    def update(self, load: int, now: float) -> float:
        decayed = self.value * 0.5 ** (max(0.0, now - self.at) / self.half_life_s)
        self.value, self.at = max(float(load), decayed), now
        return self.value


def clearly_over(in_flight: int, total: int, load_factor: float, instances: int) -> bool:
    """Whether an instance's share of the pool's requests, the new one counted, is over its bound
    beyond what chance explains: Wilson's lower bound (LEAVE_Z) above load_factor / instances.

    At 24 requests in flight on three instances this is 15 or more on one (capacity: 10); with
    two or three in flight, never. Sessions that arrive together in a chance order, or sit between
    turns, do not move; a hot key that really fills its home does.
    """
    interval = wilson(min(in_flight + 1, total), total, LEAVE_Z)
    return interval is not None and interval[0] > load_factor / instances


def bounded_load(
    ring: HashRing,
    point: int | None,
    candidates: Sequence[Candidate],
    load_factor: float,
    rng: random.Random,
    placements: Placements | None = None,
    recent_load: float = 0.0,
) -> Choice:
    """Where a key goes: its home unless the home is clearly over the bounded-load capacity.

    Reasons: `home` (the key's own instance), `over_capacity` (its home is clearly over the bound:
    the first instance clockwise under it), `away` (the key left its home earlier and stays where
    it went while the home is still at or over the capacity), `home_unavailable` (the home is down,
    full or already failed this request), `no_key` (fewest in flight), and `moved` when the key's
    previous request went to another instance (the detail says from where and why).
    `placements` (updated here) remembers each key's last instance; without it nothing moves back.
    `recent_load`: the pool's recent peak of requests in flight (decaying, see `RecentPeak`). The
    test for leaving compares the home's load with it when it is above the load now, so that a
    pool emptying at the end of a burst (its last requests, by chance or because one instance was
    slower, on one home) moves nobody.
    """
    if point is None:
        return least_in_flight(candidates, rng, "no_key")
    untried = [c for c in candidates if not c.tried]
    eligible = {c.name: c for c in (untried or candidates)}
    # Capacity counts the new request: the eligible loads sum to total - 1 < capacity * n, so some
    # instance is always under it.
    total = sum(c.in_flight for c in eligible.values()) + 1
    n = len(eligible)
    capacity = math.ceil(load_factor * total / n)
    order = [name for name in ring.walk(point) if name in eligible]
    home = eligible[order[0]]
    last = placements.get(point) if placements is not None else None
    away = eligible.get(last) if last is not None and last != home.name else None
    if away is not None and home.in_flight >= capacity and away.in_flight < capacity:
        name, reason = away.name, "away"
    elif home.in_flight < capacity or not clearly_over(home.in_flight, max(total, int(recent_load)), load_factor, n):
        name, reason = home.name, "home" if home.name == next(ring.walk(point)) else "home_unavailable"
    else:
        under = [x for x in order[1:] if eligible[x].in_flight < capacity]
        name = under[0] if under else min(order, key=lambda x: eligible[x].in_flight)
        reason = "over_capacity"
    if placements is None:
        return Choice(name, reason)
    placements.put(point, name)
    if last is None or last == name:
        return Choice(name, reason)
    why = "back home" if name == home.name and reason == "home" else reason
    return Choice(name, "moved", f"from {last} ({why})", moved_from=last)


# --- the key --------------------------------------------------------------------------------------


def hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def affinity_key(session: str | None, body: RequestBody, prefix_chars: int) -> str | None:
    """The session header's value, else the first `prefix_chars` characters of the prompt.

    For chat the prompt is read up to the end of its first user message (role and text of each
    message), so every turn of one conversation, which resends that same beginning, has one key
    however short it is; requests behind one long system prompt share a key too, which is the
    prefix an engine would cache. None: nothing to key on.
    """
    if session:
        return "session\x00" + session
    prefix = body.prompt_prefix(prefix_chars)
    return "prompt\x00" + prefix if prefix else None


# --- what /admin/state shows -----------------------------------------------------------------------


class Decisions:
    """Counts of choices by instance and reason, and the last one with its inputs: each instance's
    queue estimate (least_queue) or score (scored, in `queue`), or the key's ring point
    (prefix_affinity; None without a key)."""

    __slots__ = ("counts", "_last")

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._last: tuple[str, str, str | None, dict[str, float | None] | None, int | None] | None = None

    def record(
        self,
        name: str,
        reason: str,
        detail: str | None = None,
        queue: dict[str, float | None] | None = None,
        point: int | None = None,
    ) -> None:
        # Per request: a counter and a tuple; the view is built when someone looks.
        self.counts[(name, reason)] += 1
        self._last = (name, reason, detail, queue, point)

    def snapshot(self, policy: str) -> RoutingView:
        """The counts per instance and reason and the last choice, as `policy` chose it."""
        by_backend: dict[str, dict[str, int]] = {}
        for (name, reason), n in sorted(self.counts.items()):
            by_backend.setdefault(name, {})[reason] = n
        last = None
        if self._last is not None:
            name, reason, detail, queue, point = self._last
            last = LastChoice(backend=name, reason=reason, detail=detail)
            if policy == "least_queue":
                last.queue = queue
            elif policy == "scored":
                last.scores = queue
            elif policy == "prefix_affinity":
                last.key_hash = f"{point:016x}" if point is not None else None
                last.ring_position = round(point / 2**64, 6) if point is not None else None
        return RoutingView(policy=policy, counts=by_backend, last=last)
