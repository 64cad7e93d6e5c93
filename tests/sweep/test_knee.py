"""Saturation, the knee and the prefill fit on constructed data."""

from __future__ import annotations

import pytest

from tokenrace.sweep.knee import Point, analyse, fit_prefill, gain, is_saturated


def ladder(throughputs: list[float | None], p95s: list[float], errors: list[float] | None = None) -> list[Point]:
    errors = errors or [0.0] * len(throughputs)
    return [Point(2.0**i, t, p, e) for i, (t, p, e) in enumerate(zip(throughputs, p95s, errors, strict=False))]


def test_gain_is_relative_and_undefined_without_a_base() -> None:
    assert gain(100, 150) == pytest.approx(0.5)
    assert gain(None, 150) is None and gain(0, 10) is None and gain(10, None) is None


def test_saturation_needs_small_gain_and_rising_latency() -> None:
    a, b = Point(1, 100, 50, 0), Point(2, 105, 80, 0)
    assert is_saturated(a, b, 0.10)
    assert not is_saturated(a, Point(2, 105, 50, 0), 0.10)  # latency flat: not saturation
    assert not is_saturated(a, Point(2, 111, 80, 0), 0.10)  # gained 11 %
    assert is_saturated(a, Point(2, 90, 80, 0), 0.10)  # throughput fell


def test_knee_is_the_step_before_the_first_saturated_one() -> None:
    a = analyse(ladder([100, 190, 350, 600, 640, 650], [10, 11, 13, 18, 40, 90]))
    assert a.saturated == [False, False, False, False, True, True]
    assert a.stop_index == 4 and a.stop_reason == "saturated"
    assert a.knee_index == 3 and a.knee_reason == "saturation"
    assert a.gains[1] == pytest.approx(0.9)


def test_exactly_the_threshold_still_counts_as_growth() -> None:
    a = analyse(ladder([100, 110, 111], [10, 20, 30]), threshold=0.10)
    assert a.saturated[1] is False and a.knee_index == 1


def test_patience_waits_for_consecutive_saturated_steps() -> None:
    # one flat step (noise) and then growth again: patience 2 does not stop there
    pts = ladder([100, 190, 195, 380, 390, 392], [10, 11, 12, 14, 30, 60])
    assert analyse(pts, patience=1).knee_index == 1
    a = analyse(pts, patience=2)
    assert a.stop_index == 5 and a.knee_index == 3


def test_errors_stop_the_sweep_and_the_knee_is_the_last_healthy_step() -> None:
    a = analyse(ladder([100, 190, 300, 320], [10, 11, 12, 13], [0, 0, 0.2, 0.5]), max_error_rate=0.05)
    assert a.stop_index == 2 and a.stop_reason == "errors"
    assert a.knee_index == 1 and a.knee_reason == "errors"


def test_a_step_with_no_throughput_is_failing_and_a_first_failure_has_no_knee() -> None:
    a = analyse(ladder([None], [10], [1.0]))
    assert a.stop_reason == "errors" and a.knee_index is None


def test_no_knee_while_throughput_keeps_growing() -> None:
    a = analyse(ladder([100, 200, 400, 800], [10, 10, 11, 12]))
    assert a.stop_index is None and a.stop_reason == "completed" and a.knee_index is None


def test_prefill_fit_recovers_a_known_rate() -> None:
    tokens = [128, 256, 512, 1024, 2048]
    ttft = [30 + 0.5 * n for n in tokens]  # 0.5 ms/token = 2000 tok/s
    fit = fit_prefill(tokens, ttft)
    assert fit.prefill_tokens_per_s == pytest.approx(2000)
    assert fit.intercept_ms == pytest.approx(30) and fit.r2 == pytest.approx(1.0)


def test_prefill_fit_is_undefined_without_spread_or_slope() -> None:
    assert fit_prefill([100, 100], [5, 6]).prefill_tokens_per_s is None
    assert fit_prefill([100], [5]).slope_ms_per_token is None
    flat = fit_prefill([100, 200, 300], [20, 19, 18])
    assert flat.slope_ms_per_token is not None and flat.prefill_tokens_per_s is None
