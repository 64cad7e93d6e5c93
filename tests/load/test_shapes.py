"""Load shapes: ramp and stages offsets by inverting the integrated rate, concurrency plans, parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrace.errors import UsageError
from tokenrace.load.arrivals import schedule
from tokenrace.load.shapes import (
    ConcurrencyStage,
    RateSegment,
    Stage,
    concurrency_plan,
    parse_stages,
    ramp_offsets,
    shaped_offsets,
    stage_offsets,
)


def test_ramp_constant_inverts_the_integrated_rate() -> None:
    """Rate 0 -> 10/s over 20 s: Λ(t) = t²/4 during the ramp, so request k goes at 2√k; then 10/s."""
    offsets = ramp_offsets(10, 20, "constant", duration_s=30)
    ramp = [t for t in offsets if t < 20]
    assert len(ramp) == 100  # Λ(20) = 100 expected requests during the ramp
    assert ramp == pytest.approx([2 * math.sqrt(k) for k in range(100)])
    after = [t for t in offsets if t >= 20]
    assert after == pytest.approx([20 + k / 10 for k in range(100)])


@pytest.mark.parametrize("arrival", ["constant", "poisson", "gamma"])
def test_a_flat_shape_is_the_flat_schedule(arrival: str) -> None:
    """Same unit-rate draws, same seed: one stage at 4/s gives exactly what a flat rate of 4 gives."""
    shaped = stage_offsets([Stage(60, 4)], arrival, burstiness=0.5, seed=9)
    flat = schedule(4, arrival, duration_s=60, burstiness=0.5, seed=9)
    assert shaped == pytest.approx(flat)


def test_stages_rates_pause_and_end() -> None:
    offsets = stage_offsets(parse_stages("10s@2,10s@0,10s@4"), "constant")
    assert offsets[:3] == pytest.approx([0, 0.5, 1.0])
    assert not any(10 <= t < 20 for t in offsets)  # the pause sends nothing
    assert sum(1 for t in offsets if t < 10) == 20 and sum(1 for t in offsets if t >= 20) == 40
    assert offsets[20] == pytest.approx(20.0) and max(offsets) < 30
    assert stage_offsets(parse_stages("10s@0,10s@1"), "constant")[0] == pytest.approx(10.0)


def test_poisson_stages_follow_the_rate() -> None:
    offsets = np.array(stage_offsets(parse_stages("200s@2,200s@8"), "poisson", seed=1))
    low, high = np.sum(offsets < 200), np.sum(offsets >= 200)
    assert abs(low - 400) < 4 * math.sqrt(400) and abs(high - 1600) < 4 * math.sqrt(1600)


@given(st.floats(0.5, 50), st.floats(1, 100), st.integers(0, 2**31), st.sampled_from(["constant", "poisson", "gamma"]))
@settings(max_examples=50, deadline=None)
def test_ramp_offsets_sorted_deterministic_and_bounded(rate: float, ramp_s: float, seed: int, arrival: str) -> None:
    offsets = ramp_offsets(rate, ramp_s, arrival, count=200, seed=seed)
    assert len(offsets) == 200 and offsets[0] == 0.0
    assert all(a <= b for a, b in zip(offsets, offsets[1:], strict=False))
    assert offsets == ramp_offsets(rate, ramp_s, arrival, count=200, seed=seed)
    bounded = ramp_offsets(rate, ramp_s, arrival, duration_s=ramp_s, seed=seed)
    assert all(t < ramp_s for t in bounded)


def test_segment_time_for_linear_pieces() -> None:
    up = RateSegment(10, 0, 4)  # Λ(t) = t²/5
    assert up.expected_requests == 20 and up.time_for(5) == pytest.approx(5.0)
    down = RateSegment(10, 4, 0)  # Λ(t) = 4t - t²/5
    assert down.time_for(15) == pytest.approx(5.0)
    assert RateSegment(math.inf, 0, 0).expected_requests == 0


def test_shape_errors() -> None:
    with pytest.raises(UsageError, match="needs a request count or a duration"):
        ramp_offsets(2, 10)
    with pytest.raises(UsageError, match="positive rate"):
        ramp_offsets(0, 10, count=3)
    with pytest.raises(UsageError, match="ramp duration must be positive"):
        ramp_offsets(2, 0, count=3)
    with pytest.raises(UsageError, match="arrival must be one of"):
        stage_offsets([Stage(1, 1)], "bursty")
    with pytest.raises(UsageError, match="never sends"):
        shaped_offsets([RateSegment(5, 0, 0)], count=2)


def test_parse_stages() -> None:
    assert parse_stages("30s@2, 1m@8,500ms@0.5") == (Stage(30, 2), Stage(60, 8), Stage(0.5, 0.5))
    for bad, message in [
        ("", "empty"),
        ("30s", "item 1 '30s' is not DURATION@VALUE"),
        ("30s@2,60x@8", "item 2 '60x@8': cannot read the duration"),
        ("30s@fast", "'fast' is not a number"),
        ("30s@-1", "must be 0 or more"),
        ("0s@2", "the duration must be positive"),
        ("10s@0", "every stage has rate 0"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_stages(bad)


def test_concurrency_stages_plan() -> None:
    plan = concurrency_plan(parse_stages("30s@2,60s@8,30s@2", "concurrency"))
    assert plan == (ConcurrencyStage(0, 30, 2), ConcurrencyStage(30, 90, 8), ConcurrencyStage(90, 120, 2))
    with pytest.raises(UsageError, match="stage 2 asks for 1.5 requests in flight"):
        parse_stages("10s@1,10s@1.5", "concurrency")
    with pytest.raises(UsageError, match="concurrency 0"):
        parse_stages("10s@0", "concurrency")
    with pytest.raises(UsageError, match="rate or concurrency"):
        parse_stages("10s@1", "users")  # type: ignore[arg-type]
