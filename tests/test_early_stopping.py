"""Percentiles bounded by order statistics: LoadGen's early-stopping rule, reproduced and checked
for coverage; the exact share bounds and Fisher's test the verdict uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokenrace.stats import fisher_greater, percentile_bounds, requests_needed, share_bounds

# The requests needed to bound a percentile with t requests over the limit (issue: the MLPerf table).
TABLE = {
    (0.95, 0.50): (5, 8, 11, 18),
    (0.95, 0.90): (29, 46, 61, 103),
    (0.95, 0.95): (59, 93, 124, 208),
    (0.95, 0.99): (299, 473, 628, 1049),
    (0.99, 0.50): (7, 11, 14, 22),
    (0.99, 0.90): (44, 64, 81, 127),
    (0.99, 0.95): (90, 130, 165, 259),
    (0.99, 0.99): (459, 662, 838, 1307),
}


@pytest.mark.parametrize(("key", "row"), TABLE.items())
def test_the_requests_needed_reproduce_the_table(key: tuple[float, float], row: tuple[int, ...]) -> None:
    confidence, q = key
    assert tuple(requests_needed(q, confidence, t) for t in (0, 1, 2, 5)) == row


def test_loadgen_minimum_counts_at_p99() -> None:
    # LoadGen's early stopping at p99 and 99 % confidence: 459 queries with none over, 662 with one.
    assert requests_needed(0.99, 0.99, 0) == 459
    assert requests_needed(0.99, 0.99, 1) == 662


def test_a_p99_from_ten_requests_has_no_upper_bound() -> None:
    b = percentile_bounds([40.0 + i * 0.1 for i in range(10)], 0.99, 0.95)
    assert b.high is None and b.low is not None and b.needed_for_upper == 299


def test_the_bound_is_the_count_rule() -> None:
    # With t of n over a limit, the upper bound clears the limit exactly when n >= requests_needed.
    for t in (0, 1, 3):
        n = requests_needed(0.99, 0.95, t)
        for size, clears in ((n, True), (n - 1, False)):
            values = [10.0] * (size - t) + [1000.0] * t
            high = percentile_bounds(values, 0.99, 0.95).high
            assert (high is not None and high <= 100) is clears, (t, size)


def test_upper_bounds_cover_at_least_the_confidence() -> None:
    rng = np.random.default_rng(1)
    true_p90 = -math.log(0.1)  # of the unit exponential
    trials, covered = 2000, 0
    for _ in range(trials):
        b = percentile_bounds(list(rng.exponential(1.0, 60)), 0.90, 0.95)
        covered += b.high is not None and b.high >= true_p90
    assert covered / trials >= 0.94  # >= 0.95 but for the simulation's own noise


def test_exact_share_bounds_agree_with_the_count_rule() -> None:
    for t in (0, 2):
        n = requests_needed(0.99, 0.95, t)
        low, _ = share_bounds(n - t, n, 0.95)
        low_short, _ = share_bounds(n - 1 - t, n - 1, 0.95)
        assert low is not None and low >= 0.99 > (low_short or 0)


def test_fisher_exact_one_sided() -> None:
    # 3 of 10 against 0 of 10: C(17, 7) / C(20, 10)
    assert fisher_greater(3, 10, 0, 10) == pytest.approx(19448 / 184756)
    assert fisher_greater(1, 1, 0, 10) == pytest.approx(1 / 11)
    assert fisher_greater(0, 5, 3, 5) == 1.0
