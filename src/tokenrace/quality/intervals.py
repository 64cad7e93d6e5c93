"""Intervals and tests for proportions: Wilson's score interval, the exact McNemar test, and
Newcombe's interval for the difference of two paired proportions.

Plain functions of counts, stdlib only, so that any statistics module can take them over.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval for k successes in n trials; None when n is 0.

    Chosen over the Wald interval because it stays inside [0, 1] and keeps its coverage near the
    edges (k = 0 or k = n), where small quality suites often are.
    """
    if k < 0 or n < 0 or k > n:
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 or k = n one limit is exactly 0 or 1; rounding must not move it off.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts.

    Under the null hypothesis (both sides equally accurate) each discordant pair is a fair coin, so
    the p-value is twice the smaller binomial tail of Bin(only_a + only_b, 1/2), capped at 1. With no
    discordant pair there is no evidence either way: 1.0.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError("mcnemar_exact: counts must be >= 0")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    # Exact integer arithmetic: math.comb is exact, one division at the end.
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / (1 << n))  # int / int: correctly rounded even for huge n


def paired_difference_ci(
    both_right: int, only_a: int, only_b: int, both_wrong: int, z: float = Z95
) -> tuple[float, float, float] | None:
    """B's accuracy minus A's over the same items, with Newcombe's (1998) method 10 interval.

    Returns (difference, low, high), or None with no items. Method 10 ("square and add") combines the
    Wilson intervals of the two accuracies and corrects for their correlation (phi of the 2x2 table);
    unlike the paired Wald interval it never leaves [-1, 1] and does not collapse to zero width when
    few pairs differ.
    """
    counts = (both_right, only_a, only_b, both_wrong)
    if any(c < 0 for c in counts):
        raise ValueError("paired_difference_ci: counts must be >= 0")
    n = sum(counts)
    if n == 0:
        return None
    a, b, c, d = counts  # a: both right, b: only A right, c: only B right, d: both wrong
    p_a, p_b = (a + b) / n, (a + c) / n
    wa, wb = wilson(a + b, n, z), wilson(a + c, n, z)
    assert wa is not None and wb is not None
    l_a, u_a = wa
    l_b, u_b = wb
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    # Newcombe's phi: the 2x2 table's correlation, with a continuity correction of n/2 taken off a
    # positive cross product (and small positive ones set to 0), as the method is published.
    cross = a * d - b * c
    if denom == 0 or 0 <= cross <= n / 2:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(denom)
    else:
        phi = cross / math.sqrt(denom)
    diff = p_b - p_a
    # Newcombe writes theta = p1 - p2; here p1 is B and p2 is A (B - A is the question asked).
    lower = math.sqrt(max(0.0, (p_b - l_b) ** 2 - 2 * phi * (p_b - l_b) * (u_a - p_a) + (u_a - p_a) ** 2))
    upper = math.sqrt(max(0.0, (u_b - p_b) ** 2 - 2 * phi * (u_b - p_b) * (p_a - l_a) + (p_a - l_a) ** 2))
    return diff, max(-1.0, diff - lower), min(1.0, diff + upper)
