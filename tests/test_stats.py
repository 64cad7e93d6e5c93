from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tokenrace.stats import KEYS, describe

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def test_empty_is_none_not_zero() -> None:
    d = describe([])
    assert d.count == 0
    assert all(getattr(d, k) is None for k in KEYS if k != "count")


def test_single_value_has_no_std() -> None:
    d = describe([5.0])
    assert d.std is None and d.p50 == 5.0 and d.max == 5.0


@given(st.lists(finite, min_size=1, max_size=200))
def test_order_and_bounds(values: list[float]) -> None:
    d = describe(values)
    assert d.count == len(values)
    assert d.min is not None and d.p50 is not None and d.p90 is not None and d.p95 is not None
    assert d.p99 is not None and d.max is not None and d.mean is not None
    eps = 1e-3
    assert d.min - eps <= d.p50 <= d.p90 + eps <= d.p95 + 2 * eps <= d.p99 + 3 * eps <= d.max + 4 * eps
    assert abs(d.mean - float(np.mean(values))) <= 1e-3 + 1e-9 * abs(float(np.mean(values)))


@given(st.lists(st.tuples(finite, st.integers(1, 5)), min_size=1, max_size=50))
def test_weights_equal_repetition(pairs: list[tuple[float, int]]) -> None:
    values = [v for v, _ in pairs]
    weights = [w for _, w in pairs]
    repeated = [v for v, w in pairs for _ in range(w)]
    assert describe(values, weights) == describe(repeated)


def test_known_percentiles() -> None:
    d = describe(list(range(1, 101)))
    assert d.p50 == 50.5 and d.p99 == 99.01 and d.min == 1 and d.max == 100
