"""Bootstrap CIs on synthetic samples with a known difference: true positives and true negatives."""

from __future__ import annotations

import numpy as np
import pytest

from tokenrace.stats import difference_ci, ratio_ci


def lognormal(seed: int, n: int, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(np.log(50), 0.4, n) * scale


@pytest.mark.parametrize("stat", ["p50", "p95", "mean"])
def test_a_real_20_percent_difference_is_found_and_covered(stat: str) -> None:
    hits = covered = 0
    for seed in range(20):
        ci = ratio_ci(lognormal(seed, 400), lognormal(1000 + seed, 400, scale=1.2), stat, seed=seed, resamples=1000)
        assert ci.ratio is not None and ci.low is not None and ci.high is not None
        hits += bool(ci.significant) and ci.low > 1
        covered += ci.low <= 1.2 <= ci.high
    assert hits >= 18  # power near 1 at this size and effect
    assert covered >= 16  # ~95 % coverage; 16/20 allows for sampling luck


@pytest.mark.parametrize("stat", ["p50", "p95"])
def test_no_difference_is_mostly_within_noise(stat: str) -> None:
    false_alarms = sum(
        bool(ratio_ci(lognormal(seed, 300), lognormal(5000 + seed, 300), stat, seed=seed, resamples=1000).significant)
        for seed in range(40)
    )
    assert false_alarms <= 6  # expected 2 of 40 at 95 %; P(>6) is about 0.3 %


def test_identical_samples_are_within_noise_with_ratio_one() -> None:
    x = lognormal(1, 200)
    ci = ratio_ci(x, x.copy(), "p95")
    assert ci.ratio == 1.0 and ci.low is not None and ci.low <= 1 <= ci.high and ci.significant is False


def test_too_few_values_give_no_interval() -> None:
    ci = ratio_ci([10.0], [12.0, 13.0], "p50")
    assert ci.a == 10.0 and ci.ratio == 1.25 and ci.significant is None and ci.to_dict()["ci_low"] is None
    assert ratio_ci([], [], "p50").a is None


def test_seeded_and_repeatable() -> None:
    a, b = lognormal(1, 100), lognormal(2, 100)
    assert ratio_ci(a, b, "p95", seed=7) == ratio_ci(a, b, "p95", seed=7)


def correlated_groups(seed: int, n: int, scale: float = 1.0) -> list[np.ndarray]:
    """Requests whose gaps share a per-request level (as ITL does under batching)."""
    rng = np.random.default_rng(seed)
    return [rng.lognormal(np.log(10), 0.5) * scale * rng.lognormal(0, 0.05, 30) for _ in range(n)]


def test_grouped_bootstrap_is_wider_than_pretending_gaps_are_independent() -> None:
    a, b = correlated_groups(1, 60), correlated_groups(2, 60)
    grouped = ratio_ci(a, b, "p50", grouped=True, resamples=800)
    naive = ratio_ci(np.concatenate(a), np.concatenate(b), "p50", resamples=800)
    assert grouped.ratio == pytest.approx(naive.ratio)
    assert (grouped.high - grouped.low) > 2 * (naive.high - naive.low)


def test_grouped_bootstrap_finds_a_real_difference() -> None:
    ci = ratio_ci(correlated_groups(3, 80), correlated_groups(4, 80, scale=1.6), "p50", grouped=True, resamples=800)
    assert ci.significant and ci.low > 1 and ci.low <= 1.6 <= ci.high * 1.15


def test_error_rate_difference() -> None:
    rng = np.random.default_rng(0)
    low, high = (rng.random(400) < 0.02).astype(float), (rng.random(400) < 0.15).astype(float)
    diff, lo, hi = difference_ci(low.tolist(), high.tolist())
    assert diff is not None and diff > 0.08 and lo > 0
    same_a, same_b = (rng.random(400) < 0.05).astype(float), (rng.random(400) < 0.05).astype(float)
    _, lo, hi = difference_ci(same_a.tolist(), same_b.tolist())
    assert lo < 0 < hi or (lo <= 0 <= hi)
    assert difference_ci([], [1.0]) == (None, None, None)
