"""Load shapes: a request rate that changes over time (a ramp, stages), or a plan of concurrency stages.

A shaped rate r(t) is piecewise linear (`RateSegment`s). Send offsets come from the same unit-rate
arrival process as a flat rate (constant, Poisson or gamma gaps from `bench.arrivals.gaps`, with the
same burstiness and seed), mapped through the inverse of the integrated rate
Λ(t) = ∫₀ᵗ r: arrival k of the unit process, at u_k, is sent at the first t with Λ(t) > u_k. This
time change keeps the process's character (Poisson stays Poisson, with a varying rate; constant
stays evenly spaced in expected requests), and with a flat rate it gives exactly the flat schedule.
The first request is at the first moment the rate is positive (0 for a ramp). Pure and
deterministic given the seed, so that the one open-loop scheduler (and its schedule lag) serves
every shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.load.arrivals import ARRIVALS, gaps
from tokenrace.units import parse_duration_s

StagesKind: TypeAlias = Literal["rate", "concurrency"]


@dataclass(frozen=True, slots=True)
class RateSegment:
    """The rate goes linearly from `start_rate` to `end_rate` (requests/s) over `duration_s` (may be inf)."""

    duration_s: float
    start_rate: float
    end_rate: float

    @property
    def expected_requests(self) -> float:
        if math.isinf(self.duration_s):
            return math.inf if self.start_rate > 0 or self.end_rate > 0 else 0.0
        return (self.start_rate + self.end_rate) / 2 * self.duration_s

    def time_for(self, requests: float) -> float:
        """Seconds into the segment until `requests` (<= expected_requests) are expected."""
        if requests <= 0:
            return 0.0
        a = self.start_rate
        if a == self.end_rate:
            return requests / a
        slope = (self.end_rate - a) / self.duration_s
        # The root of slope/2 t² + a t = requests, in the form that stays accurate when slope ~ 0.
        return 2 * requests / (a + math.sqrt(max(a * a + 2 * slope * requests, 0.0)))


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage: `value` (requests/s, or requests in flight) held for `duration_s`."""

    duration_s: float
    value: float


@dataclass(frozen=True, slots=True)
class ConcurrencyStage:
    """Keep `concurrency` requests in flight from `start_s` to `end_s` (seconds from the start)."""

    start_s: float
    end_s: float
    concurrency: int


def ramp_segments(rate: float, ramp_s: float) -> list[RateSegment]:
    """0 -> `rate` linearly over `ramp_s`, then `rate` for as long as the run lasts."""
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"a ramp needs a positive rate, got {rate}")
    if not (ramp_s > 0 and math.isfinite(ramp_s)):
        raise UsageError(f"ramp duration must be positive, got {ramp_s} s")
    return [RateSegment(ramp_s, 0.0, rate), RateSegment(math.inf, rate, rate)]


def stage_segments(stages: Sequence[Stage]) -> list[RateSegment]:
    """A constant-rate segment per stage."""
    return [RateSegment(s.duration_s, s.value, s.value) for s in stages]


def shaped_offsets(
    segments: Sequence[RateSegment],
    arrival: str = "poisson",
    *,
    count: int | None = None,
    duration_s: float | None = None,
    burstiness: float = 1.0,
    seed: int | None = 0,
) -> list[float]:
    """Send offsets (s) under the shaped rate: `count` of them, or all before `duration_s`, or all
    before the segments end."""
    if arrival not in ARRIVALS:
        raise UsageError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if arrival == "gamma" and burstiness <= 0:
        raise UsageError(f"burstiness must be positive, got {burstiness}")
    ends_at = sum(s.duration_s for s in segments)
    if count is None and duration_s is None and math.isinf(ends_at):
        raise UsageError("an open-ended shape needs a request count or a duration")
    if not any(s.expected_requests > 0 for s in segments):
        raise UsageError("the shape never sends a request: every rate is 0")
    limit = min(ends_at, duration_s if duration_s is not None else math.inf)
    unit = gaps(1.0, arrival, burstiness, seed)
    offsets: list[float] = []
    u = 0.0
    while count is None or len(offsets) < count:
        t = _inverse(segments, u)
        if t is None or t >= limit:
            break
        offsets.append(t)
        u += next(unit)
    return offsets


def _inverse(segments: Sequence[RateSegment], u: float) -> float | None:
    """The first t with Λ(t) > u, or None when the shape ends first."""
    start, before = 0.0, 0.0
    for seg in segments:
        mass = seg.expected_requests
        if before + mass > u:
            return start + seg.time_for(u - before)
        start += seg.duration_s
        before += mass
    return None


def ramp_offsets(
    rate: float,
    ramp_s: float,
    arrival: str = "poisson",
    *,
    count: int | None = None,
    duration_s: float | None = None,
    burstiness: float = 1.0,
    seed: int | None = 0,
) -> list[float]:
    """Offsets for a rate ramping linearly from 0 to `rate` over `ramp_s`, then holding."""
    segments = ramp_segments(rate, ramp_s)
    return shaped_offsets(segments, arrival, count=count, duration_s=duration_s, burstiness=burstiness, seed=seed)


def stage_offsets(
    stages: Sequence[Stage],
    arrival: str = "poisson",
    *,
    count: int | None = None,
    burstiness: float = 1.0,
    seed: int | None = 0,
) -> list[float]:
    """Offsets for piecewise-constant rate stages (a stage of rate 0 is a pause)."""
    return shaped_offsets(stage_segments(stages), arrival, count=count, burstiness=burstiness, seed=seed)


def concurrency_plan(stages: Sequence[Stage]) -> tuple[ConcurrencyStage, ...]:
    """Concurrency stages with their start and end times; values must be whole numbers."""
    plan: list[ConcurrencyStage] = []
    t = 0.0
    for i, stage in enumerate(stages, 1):
        if stage.value != int(stage.value) or stage.value < 0:
            raise InvalidInput("stages", f"stage {i} asks for {stage.value} requests in flight; use a whole number")
        plan.append(ConcurrencyStage(t, t + stage.duration_s, int(stage.value)))
        t += stage.duration_s
    if not any(s.concurrency > 0 for s in plan):
        raise InvalidInput("stages", "every stage has concurrency 0")
    return tuple(plan)


def parse_stages(text: str, kind: StagesKind = "rate") -> tuple[Stage, ...]:
    """`"30s@2,60s@8,30s@2"` -> stages of (duration, value). Raises UsageError naming the item."""
    if kind not in ("rate", "concurrency"):
        raise InvalidInput("stages_kind", f"must be rate or concurrency, got {kind!r}")
    items = [item.strip() for item in text.split(",")]
    if not text.strip():
        raise InvalidInput("stages", "empty (use DURATION@VALUE,..., e.g. 30s@2,60s@8)")
    stages = []
    for i, item in enumerate(items, 1):
        duration, sep, value = item.partition("@")
        if not sep:
            raise InvalidInput("stages", f"item {i} {item!r} is not DURATION@VALUE (e.g. 30s@2)")
        try:
            number = float(value)
        except ValueError:
            raise InvalidInput("stages", f"item {i} {item!r}: {value!r} is not a number") from None
        if not (number >= 0 and math.isfinite(number)):
            raise InvalidInput("stages", f"item {i} {item!r}: the {kind} must be 0 or more")
        stages.append(Stage(parse_duration_s(duration, f"stages: item {i} {item!r}"), number))
    if kind == "concurrency":
        concurrency_plan(stages)  # the checks: whole numbers, not all 0
    elif not any(s.value > 0 for s in stages):
        raise InvalidInput("stages", "every stage has rate 0")
    return tuple(stages)
