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
- `prefix_affinity`: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
  "Consistent Hashing with Bounded Loads", 2018). A request's key (the session header, else the
  first characters of its prompt) hashes to a point on a ring of virtual nodes; it goes to the
  first instance clockwise whose load is under `ceil(load_factor * (total load + 1) / instances)`.
  The same key goes to the same instance, so that instance's prefix cache holds its prefix, while
  no instance carries more than `load_factor` times the mean: a hot key spills over to the next
  instance on the ring, not to all of them. Adding or removing an instance moves only the keys on
  its arcs.

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
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenrace.engines import ENGINES

VNODES = 160  # points per instance on the ring (ketama's figure): arcs within a few % of equal

# Queue and KV-cache gauges by engine, from the engines catalog. All KV figures are fractions in
# [0, 1] (vLLM's "_perc" too).
WAITING = {name: e.name for e in ENGINES.values() if e.metrics for name in e.metrics.gauges.get("waiting", ())}
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


@dataclass(frozen=True, slots=True)
class Choice:
    name: str
    reason: str
    detail: str | None = None  # e.g. the instance and cause of a fallback to in-flight


def parse_load(text: str, at: float, in_flight_at: int) -> Load:
    """The queue and KV-cache gauges of one /metrics text (summed over label sets; KV: the fullest).

    A text that does not parse, or has no queue gauge, is a Load with `error`/no `waiting`.
    """
    from prometheus_client.parser import text_string_to_metric_families

    waiting: dict[str, float] = {}
    kv: list[float] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                engine = WAITING.get(sample.name)
                if engine is not None:
                    waiting[engine] = waiting.get(engine, 0.0) + float(sample.value)
                elif sample.name in KV_USAGE and math.isfinite(sample.value):
                    kv.append(float(sample.value))
    except ValueError as exc:
        return Load(at, in_flight_at, error=f"unparseable /metrics: {str(exc)[:120]}")
    if not waiting:
        return Load(at, in_flight_at, kv_usage=max(kv) if kv else None)
    engine = next(iter(waiting))
    return Load(at, in_flight_at, waiting[engine], max(kv) if kv else None, engine)


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


def bounded_load(
    ring: HashRing, point: int | None, candidates: Sequence[Candidate], load_factor: float, rng: random.Random
) -> Choice:
    """The first instance clockwise from `point` under the bounded-load capacity.

    Reasons: `home` (the key's own instance), `over_capacity` (it, and maybe others after it, had
    `load_factor` times the mean load), `home_unavailable` (it is down, full or already failed this
    request), `no_key` (the request has no key: fewest in flight).
    """
    if point is None:
        return least_in_flight(candidates, rng, "no_key")
    untried = [c for c in candidates if not c.tried]
    eligible = {c.name: c for c in (untried or candidates)}
    # Capacity counts the new request: the eligible loads sum to total - 1 < capacity * n, so some
    # instance is always under it.
    total = sum(c.in_flight for c in eligible.values()) + 1
    capacity = math.ceil(load_factor * total / len(eligible))
    over = False
    for rank, name in enumerate(ring.walk(point)):
        c = eligible.get(name)
        if c is None:
            continue
        if c.in_flight < capacity:
            reason = "home" if rank == 0 else "over_capacity" if over else "home_unavailable"
            return Choice(name, reason)
        over = True
    return least_in_flight(list(eligible.values()), rng, "over_capacity")  # not reached: see above


# --- the key --------------------------------------------------------------------------------------


def hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def affinity_key(session: str | None, body: Mapping[str, Any], prefix_chars: int) -> str | None:
    """The session header's value, else the first `prefix_chars` characters of the prompt.

    For chat the prompt is read up to the end of its first user message (role and text of each
    message), so every turn of one conversation, which resends that same beginning, has one key
    however short it is; requests behind one long system prompt share a key too, which is the
    prefix an engine would cache. None: nothing to key on.
    """
    if session:
        return "session\x00" + session
    prefix = prompt_prefix(body, prefix_chars)
    return "prompt\x00" + prefix if prefix else None


def prompt_prefix(body: Mapping[str, Any], limit: int) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        parts: list[str] = []
        size = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            piece = f"{message.get('role')}\x00{_text_of(message.get('content'))}\x00"
            parts.append(piece)
            size += len(piece)
            if size >= limit or message.get("role") == "user":
                break
        return "".join(parts)[:limit]
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt:
        prompt = prompt[0] if isinstance(prompt[0], str) else " ".join(map(str, prompt[:limit]))
    return prompt[:limit] if isinstance(prompt, str) else ""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only the text ones say what the prefix is
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


# --- what /admin/state shows -----------------------------------------------------------------------


class Decisions:
    """Counts of choices by instance and reason, and the last one with its inputs."""

    __slots__ = ("counts", "_last")

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._last: tuple[str, str, str | None, dict[str, Any] | None] | None = None

    def record(self, name: str, reason: str, detail: str | None = None, inputs: dict[str, Any] | None = None) -> None:
        # Per request: a counter and a tuple; the dicts are built when someone looks.
        self.counts[(name, reason)] += 1
        self._last = (name, reason, detail, inputs)

    def snapshot(self) -> dict[str, Any]:
        by_backend: dict[str, dict[str, int]] = {}
        for (name, reason), n in sorted(self.counts.items()):
            by_backend.setdefault(name, {})[reason] = n
        last = None
        if self._last is not None:
            name, reason, detail, inputs = self._last
            last = {"backend": name, "reason": reason, "detail": detail, **(inputs or {})}
        return {"counts": by_backend, "last": last}
