"""Distribution statistics and interval estimates, one implementation for every metric.

`describe` returns a `Stats` (tokenrace.model.stats): count, mean, std, min, p50, p90, p95, p99,
max. With no values every statistic but count is None: an undefined figure is never reported as 0.

Bootstrap confidence intervals for comparing two runs, from their per-request values.

One method for every metric: resample each run's requests with replacement (seeded), compute the
statistic on both resamples, and take the 2.5th and 97.5th percentiles of the resampled ratio B/A
(a percentile bootstrap). For pooled values that come several to a request (ITL gaps), whole
requests are resampled with all their values, because gaps within one request are not independent.
The statistics themselves are the same numpy linear-interpolation percentiles as `stats.describe`.

Proportions (quality suites): Wilson's score interval, the exact McNemar test, and Newcombe's
interval for the difference of two paired proportions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tokenrace.model.stats import Spread, Stats

PERCENTILES = (50, 90, 95, 99)
KEYS = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max")


def describe(values: Sequence[float], weights: Sequence[int] | None = None) -> Stats:
    """Summary statistics. Integer `weights` count each value that many times (e.g. tokens)."""
    arr = np.asarray(values, dtype=float)
    if weights is not None:
        arr = np.repeat(arr, np.asarray(weights, dtype=int))
    return Stats.model_validate(_described(arr, PERCENTILES)) if arr.size else Stats()


SPREAD_PERCENTILES = (5, 25, 50, 75, 90, 95, 99)


def spread(values: Sequence[float]) -> Spread:
    """`describe` with the references' percentiles (P5 ... P99): the same numpy linear interpolation
    (pandas' `quantile`, which LLMPerf uses, interpolates the same way)."""
    arr = np.asarray(values, dtype=float)
    return Spread.model_validate(_described(arr, SPREAD_PERCENTILES)) if arr.size else Spread()


def _described(arr: np.ndarray, percentiles: Sequence[int]) -> dict[str, float | int | None]:
    """count, mean, std, min, max and `p<N>` for each of `percentiles`, of a non-empty array."""
    out: dict[str, float | int | None] = {
        "count": int(arr.size),
        "mean": _r4(float(arr.mean())),
        "std": _r4(float(arr.std(ddof=1))) if arr.size > 1 else None,
        "min": _r4(float(arr.min())),
        "max": _r4(float(arr.max())),
    }
    for p, v in zip(percentiles, np.percentile(arr, percentiles), strict=True):
        out[f"p{p}"] = _r4(float(v))
    return out


def describe_mean(total: float, count: int) -> Stats:
    """Statistics of `count` values known only by their sum: the mean is exact, the spread unknown."""
    if count <= 0:
        return Stats()
    return Stats(count=count, mean=round(total / count, 4))


RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0
_BATCH = 250  # resamples computed at once; bounds memory for large runs
_GROUPED_WORK = 200_000_000  # pooled values handled per grouped bootstrap, at most
MIN_RESAMPLES = 200


@dataclass(frozen=True, slots=True)
class RatioCI:
    """B/A of a statistic, with its bootstrap confidence interval."""

    a: float | None
    b: float | None
    ratio: float | None
    low: float | None
    high: float | None
    # A percentile that a run's requests cannot bound has no honest interval: the requests each run
    # would need (the order-statistic rule, both sides at the interval's confidence); None otherwise.
    needed: int | None = None

    @property
    def significant(self) -> bool | None:
        """True when the interval excludes 1; None when there is no interval."""
        if self.low is None or self.high is None:
            return None
        return self.low > 1.0 or self.high < 1.0

    def to_dict(self) -> dict[str, float | bool | None]:
        return {
            "a": _r4(self.a),
            "b": _r4(self.b),
            "ratio": _r4(self.ratio),
            "ci_low": _r4(self.low),
            "ci_high": _r4(self.high),
            "significant": self.significant,
        }


def _r4(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def statistic(values: np.ndarray, stat: str) -> float:
    """'p50', 'p95', ... or 'mean'."""
    if stat == "mean":
        return float(values.mean())
    return float(np.percentile(values, float(stat.removeprefix("p"))))


def _stat_rows(samples: np.ndarray, stat: str) -> np.ndarray:
    if stat == "mean":
        return np.asarray(samples.mean(axis=1), dtype=float)
    return np.asarray(np.percentile(samples, float(stat.removeprefix("p")), axis=1), dtype=float)


def _resampled(values: np.ndarray, stat: str, rng: np.random.Generator, n: int) -> np.ndarray:
    out = []
    for start in range(0, n, _BATCH):
        k = min(_BATCH, n - start)
        idx = rng.integers(0, values.size, size=(k, values.size))
        out.append(_stat_rows(values[idx], stat))
    return np.concatenate(out)


def _grouped_resampled(groups: Sequence[np.ndarray], stat: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """Resample whole groups (requests) and pool their values."""
    flat = np.concatenate(groups)
    # Each resample pools every value again; very long runs get fewer resamples (never under 200).
    n = max(MIN_RESAMPLES, min(n, _GROUPED_WORK // max(flat.size, 1)))
    lengths = np.array([g.size for g in groups])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty(n)
    for i in range(n):  # one resample at a time: each pools a different number of values
        pick = rng.integers(0, len(groups), size=len(groups))
        ln, st = lengths[pick], starts[pick]
        total = int(ln.sum())
        if total == 0:
            out[i] = np.nan
            continue
        # index of each pooled value: its group's start + its position within the group
        offsets = np.repeat(st - np.concatenate([[0], np.cumsum(ln)[:-1]]), ln)
        out[i] = statistic(flat[offsets + np.arange(total)], stat)
    return out


def ratio_ci(
    a: Sequence[float] | Sequence[np.ndarray] | np.ndarray,
    b: Sequence[float] | Sequence[np.ndarray] | np.ndarray,
    stat: str = "p50",
    grouped: bool = False,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> RatioCI:
    """CI of stat(B)/stat(A). With grouped=True, `a` and `b` are lists of per-request arrays."""
    xa, xb = _as_groups(a, grouped), _as_groups(b, grouped)
    sa, sb = _point(xa, stat), _point(xb, stat)
    ratio = sb / sa if sa is not None and sb is not None and sa > 0 else None
    if ratio is None or xa is None or xb is None or len(xa) < 2 or len(xb) < 2:
        return RatioCI(sa, sb, ratio, None, None)  # a statistic needs one value; an interval two
    needed = bounding_requests(stat, confidence)
    if needed is not None and min(len(xa), len(xb)) < needed:
        # The bootstrap would still give an interval, and a narrow one: it never reaches past the
        # largest value resampled. Too few requests to bound the percentile is no interval.
        return RatioCI(sa, sb, ratio, None, None, needed)
    rng = np.random.default_rng(seed)
    ra = _draw(xa, stat, rng, resamples, grouped)
    rb = _draw(xb, stat, rng, resamples, grouped)
    k = min(ra.size, rb.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rb[:k] / ra[:k]
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size < k // 2:  # mostly undefined (a statistic of 0 in A's resamples)
        return RatioCI(sa, sb, ratio, None, None)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return RatioCI(sa, sb, ratio, float(low), float(high))


def bounding_requests(stat: str, confidence: float = CONFIDENCE) -> int | None:
    """The requests that bound a percentile statistic ('p99') on both sides of a two-sided interval
    at `confidence` (each side at (1 + c) / 2); None for a mean."""
    if not stat.startswith("p"):
        return None
    q = float(stat.removeprefix("p")) / 100
    side = (1 + confidence) / 2
    return max(requests_needed(q, side), requests_needed(1 - q, side))


def _as_groups(
    x: Sequence[float] | Sequence[np.ndarray] | np.ndarray, grouped: bool
) -> np.ndarray | list[np.ndarray] | None:
    if grouped:
        groups = [np.asarray(g, dtype=float) for g in x]
        groups = [g for g in groups if g.size]
        return groups or None
    arr = np.asarray(x, dtype=float)
    return arr if arr.size else None


def _point(x: np.ndarray | list[np.ndarray] | None, stat: str) -> float | None:
    if x is None:
        return None
    flat = np.concatenate(x) if isinstance(x, list) else x
    return statistic(flat, stat)


def _draw(x: np.ndarray | list[np.ndarray], stat: str, rng: np.random.Generator, n: int, grouped: bool) -> np.ndarray:
    if grouped:
        assert isinstance(x, list)
        return _grouped_resampled(x, stat, rng, n)
    assert isinstance(x, np.ndarray)
    return _resampled(x, stat, rng, n)


def statistic_ci(
    values: Sequence[float] | Sequence[Sequence[float]],
    stat: str = "p50",
    grouped: bool = False,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float | None, float | None, float | None]:
    """One run's statistic with its percentile-bootstrap interval: (value, low, high).

    The same resampling as `ratio_ci`, on one side only; with grouped=True `values` is a list of
    per-request lists (whole requests are resampled). No value: all None; one value: no interval."""
    x = _as_groups(values, grouped)  # type: ignore[arg-type]
    point = _point(x, stat)
    if x is None or point is None or len(x) < 2:
        return point, None, None
    drawn = _draw(x, stat, np.random.default_rng(seed), resamples, grouped)
    drawn = drawn[np.isfinite(drawn)]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(drawn, [tail, 100 - tail])
    return point, float(low), float(high)


def difference_ci(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
    stat: str = "mean",
) -> tuple[float | None, float | None, float | None]:
    """stat(B) - stat(A) with its bootstrap CI (`stat`: 'mean', 'p50', ...); for rates such as the
    error rate (0/1 per request), where a ratio is undefined whenever A is 0, and for differences
    of a latency between two kinds of request of one run."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        return None, None, None
    diff = statistic(xb, stat) - statistic(xa, stat)
    rng = np.random.default_rng(seed)
    da = _resampled(xa, stat, rng, resamples)
    db = _resampled(xb, stat, rng, resamples)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(db - da, [tail, 100 - tail])
    return diff, float(low), float(high)


# --- proportions ---------------------------------------------------------------------------------

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


# --- percentiles bounded by order statistics (MLPerf LoadGen's early-stopping rule) ---------------
#
# A percentile of n requests is bounded without any assumption on the latency's distribution: the
# number of requests under the true q-quantile is Bin(n, q), so the k-th smallest value lies above
# the quantile with probability P(Bin(n, q) <= k - 1). The upper bound at confidence c is the
# smallest order statistic with that probability >= c; when even the largest value does not reach
# c, the n requests cannot bound the percentile from above and the bound is open (None). The same
# rule, read as a count of requests over a limit, is LoadGen's early-stopping test (mlcommons/
# inference, loadgen/results.cc): with t of n over the limit, the percentile is within it at
# confidence c when P(Bin(n, 1 - q) <= t) <= 1 - c. The percentile bootstrap cannot do this: its
# interval never reaches past the largest value, so a handful of fast requests "bound" any p99.
#
# The binomial tails are summed exactly in log space (no statistics package is a dependency; the
# sums are the definition, as LoadGen computes them).


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    return float(_binom_cdf_all(n, p)[k])


def requests_needed(q: float, confidence: float, over: int = 0) -> int:
    """The fewest requests with which `over` of them above a limit still shows the q-quantile (q in
    (0, 1)) within it at `confidence`: LoadGen's n = h + t, with h the smallest value such that
    I(q; h, t + 1) <= 1 - c (the regularized incomplete beta, here the binomial tail it equals)."""
    if not 0 < q < 1 or not 0 < confidence < 1 or over < 0:
        raise ValueError(
            f"requests_needed: need 0 < q < 1, 0 < confidence < 1, over >= 0; got {q}, {confidence}, {over}"
        )
    alpha = 1.0 - confidence

    def enough(n: int) -> bool:
        return binom_cdf(over, n, 1.0 - q) <= alpha

    hi = over + 1
    while not enough(hi):
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:  # binom_cdf(over, n, .) falls as n grows: bisect for the first n that is enough
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi if hi > over else over + 1


@dataclass(frozen=True, slots=True)
class PercentileBound:
    """A percentile of n values with its distribution-free bounds at `confidence`, each one-sided
    (together they cover the percentile with probability at least 2c - 1). None: open, the values
    cannot bound that side; `needed_for_upper` / `needed_for_lower` say how many would."""

    q: float  # in (0, 1)
    n: int
    value: float | None
    low: float | None
    high: float | None
    confidence: float

    @property
    def needed_for_upper(self) -> int:
        return requests_needed(self.q, self.confidence)

    @property
    def needed_for_lower(self) -> int:
        return requests_needed(1.0 - self.q, self.confidence)


def percentile_bounds(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> PercentileBound:
    """The q-quantile (q in (0, 1)) of `values` and its order-statistic bounds (see above)."""
    arr = np.sort(np.asarray(values, dtype=float))
    n = int(arr.size)
    if n == 0:
        return PercentileBound(q, 0, None, None, None, confidence)
    value = float(np.percentile(arr, q * 100))
    cdf = _binom_cdf_all(n, q)  # cdf[i] = P(Bin(n, q) <= i)
    # upper: the smallest k with P(Bin(n, q) <= k - 1) >= c
    ks = np.nonzero(cdf[:n] >= confidence)[0]
    # lower: the largest j with P(Bin(n, q) >= j) >= c, i.e. 1 - P(Bin(n, q) <= j - 1) >= c
    js = np.nonzero(1.0 - cdf[:n] >= confidence)[0]  # index i stands for j = i + 1
    high = float(arr[ks[0]]) if ks.size else None
    low = float(arr[js[-1]]) if js.size else None
    return PercentileBound(q, n, value, low, high, confidence)


def _binom_cdf_all(n: int, p: float) -> np.ndarray:
    """P(Bin(n, p) <= i) for i = 0 .. n, at once (log factorials, normalised in log space)."""
    logfact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])
    i = np.arange(n + 1, dtype=float)
    logpmf = logfact[n] - logfact[: n + 1] - logfact[::-1] + i * math.log(p) + (n - i) * math.log1p(-p)
    pmf = np.exp(logpmf - logpmf.max())
    return np.asarray(np.cumsum(pmf) / pmf.sum(), dtype=float)


def share_bounds(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """Exact (Clopper-Pearson) one-sided bounds at `confidence` on the share behind k of n: the
    lowest share under which k or more would be seen with probability 1 - c, and the highest under
    which k or fewer would. The lower bound reaches q exactly when LoadGen's test passes for the
    q-quantile with n - k requests over the limit. (None, None) with no trial."""
    if not 0 <= k <= n:
        raise ValueError(f"share_bounds: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None, None
    alpha = 1.0 - confidence

    def root(f: Callable[[float], bool]) -> float:  # the boundary of a monotone predicate on [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) else (lo, mid)
        return lo

    # P(Bin(n, p) >= k) rises with p: the lower bound is the largest p where it is still <= alpha
    low = 0.0 if k == 0 else root(lambda p: 1.0 - binom_cdf(k - 1, n, p) <= alpha)
    # P(Bin(n, p) <= k) falls with p: the upper bound is the largest p where it is still >= alpha
    high = 1.0 if k == n else root(lambda p: binom_cdf(k, n, p) >= alpha)
    return low, high


def fisher_greater(a: int, n1: int, b: int, n2: int) -> float:
    """One-sided Fisher exact test: the p-value that group 1 (a of n1) has a larger share than group
    2 (b of n2) by chance alone, P(X >= a) for X hypergeometric with the margins fixed."""
    if not (0 <= a <= n1 and 0 <= b <= n2):
        raise ValueError(f"fisher_greater: need 0 <= a <= n1 and 0 <= b <= n2; got {a}/{n1}, {b}/{n2}")
    total, hits = n1 + n2, a + b
    if n1 == 0 or n2 == 0 or hits == 0:
        return 1.0
    denom = math.comb(total, n1)
    top = min(hits, n1)
    num = sum(math.comb(hits, x) * math.comb(total - hits, n1 - x) for x in range(a, top + 1))
    return min(1.0, num / denom)
