from __future__ import annotations

import numpy as np
import pytest

from tokenrace.errors import UsageError
from tokenrace.load.arrivals import schedule


def test_constant_is_evenly_spaced() -> None:
    assert schedule(4.0, "constant", count=5) == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("arrival,burst", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 4.0)])
def test_mean_rate_matches(arrival: str, burst: float) -> None:
    offs = schedule(10.0, arrival, count=20001, burstiness=burst, seed=1)
    gaps = np.diff(offs)
    assert abs(gaps.mean() - 0.1) < 0.005
    # Gamma(k) gaps have coefficient of variation 1/sqrt(k): burstiness changes the spread only.
    assert abs(gaps.std() / gaps.mean() - 1 / np.sqrt(burst)) < 0.05


def test_seeded_and_duration_bounded() -> None:
    a = schedule(5.0, "poisson", duration_s=3.0, seed=7)
    assert a == schedule(5.0, "poisson", duration_s=3.0, seed=7)
    assert a[0] == 0.0 and all(x < 3.0 for x in a)


def test_bad_input() -> None:
    with pytest.raises(UsageError):
        schedule(0, "poisson", count=3)
    with pytest.raises(UsageError):
        schedule(1, "weird", count=3)
    with pytest.raises(UsageError):
        schedule(1, "poisson")
