"""Wilson, exact McNemar and Newcombe's paired interval against published values and simulation."""

from __future__ import annotations

import math
import random

import pytest

from tokenrace.stats import mcnemar_exact, paired_difference_ci, wilson


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3.
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        (29, 29, 0.8830, 1.0),
    ],
)
def test_wilson_matches_newcombe_table(k: int, n: int, low: float, high: float) -> None:
    ci = wilson(k, n)
    assert ci is not None
    assert ci[0] == pytest.approx(low, abs=5e-5)
    assert ci[1] == pytest.approx(high, abs=5e-5)


def test_wilson_undefined_and_bad_input() -> None:
    assert wilson(0, 0) is None
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_wilson_covers_the_true_share_about_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    trials, covered = 2000, 0
    for _ in range(trials):
        p = rng.choice([0.1, 0.3, 0.5, 0.8])
        k = sum(rng.random() < p for _ in range(60))
        ci = wilson(k, 60)
        assert ci is not None
        covered += ci[0] <= p <= ci[1]
    # Wilson's actual coverage at n=60 stays within a point or two of 95 %; 2000 draws add ~0.5 % noise.
    assert 0.93 <= covered / trials <= 0.975


@pytest.mark.parametrize(
    ("only_a", "only_b", "p"),
    [
        (1, 9, 22 / 1024),  # 2 * (C(10,0) + C(10,1)) / 2^10
        (9, 1, 22 / 1024),
        (0, 6, 2 / 64),
        (5, 5, 1.0),  # capped at 1
        (0, 0, 1.0),  # no discordant pair: no evidence
        (3, 12, 2 * sum(math.comb(15, i) for i in range(4)) / 2**15),  # 0.03516
    ],
)
def test_exact_mcnemar_known_values(only_a: int, only_b: int, p: float) -> None:
    assert mcnemar_exact(only_a, only_b) == pytest.approx(p, rel=1e-12)


def test_exact_mcnemar_textbook_value() -> None:
    # 3 vs 12 discordant pairs: the exact two-sided p is 0.0352 (binomial tables).
    assert round(mcnemar_exact(3, 12), 4) == 0.0352


def test_paired_difference_matches_the_published_example() -> None:
    # Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables, ch. 8 (Cavo et al., 2012):
    # the 2x2 table 59, 6 / 16, 80 gives -0.0621 (95 % CI -0.1186 to -0.0046) for row minus column.
    # Here A is the row and B the column, and the function reports B - A: the signs flip.
    ci = paired_difference_ci(59, 6, 16, 80)
    assert ci is not None
    diff, low, high = ci
    assert diff == pytest.approx(0.0621, abs=5e-5)
    assert low == pytest.approx(0.0046, abs=5e-5)
    assert high == pytest.approx(0.1186, abs=5e-5)


def test_paired_difference_edges() -> None:
    assert paired_difference_ci(0, 0, 0, 0) is None
    same = paired_difference_ci(30, 0, 0, 10)
    assert same is not None and same[0] == 0 and same[1] < 0 < same[2]
    extreme = paired_difference_ci(0, 20, 0, 0)
    assert extreme is not None and extreme[0] == -1 and -1 <= extreme[1] and extreme[2] < 0


def test_paired_difference_covers_the_true_difference() -> None:
    rng = random.Random(11)
    trials, covered = 1000, 0
    for _ in range(trials):
        # A right with 0.6; B agrees with A 80 % of the time, else flips: P(B right) = 0.56.
        cells = [0, 0, 0, 0]
        for _ in range(120):
            a = rng.random() < 0.6
            b = a if rng.random() < 0.8 else not a
            cells[0 if a and b else 1 if a else 2 if b else 3] += 1
        ci = paired_difference_ci(*cells)
        assert ci is not None
        covered += ci[1] <= 0.56 - 0.6 <= ci[2]
    assert 0.93 <= covered / trials <= 0.985
