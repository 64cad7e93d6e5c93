"""One grammar for durations and token sizes, whichever flag or field gives them."""

from __future__ import annotations

import pytest

from tokenrace.errors import UsageError
from tokenrace.units import parse_duration_s, parse_mean_std, parse_values


def test_parse_duration() -> None:
    assert [parse_duration_s(t) for t in ("90", "90s", "5m", "1h", "250ms", " 2M ")] == [90, 90, 300, 3600, 0.25, 120]
    assert parse_duration_s(None, "--duration") is None
    with pytest.raises(UsageError, match="ramp: cannot read the duration 'soon'"):
        parse_duration_s("soon", "ramp")
    for bad in ("0s", "-3m", "inf", "nan"):
        with pytest.raises(UsageError, match=r"--duration: the duration must be positive"):
            parse_duration_s(bad, "--duration")


def test_parse_mean_std() -> None:
    assert parse_mean_std("512", "--input-tokens") == (512, 0.0)
    assert parse_mean_std("512,64", "--input-tokens") == (512, 64.0)
    assert parse_mean_std(None, "--input-tokens") is None
    for bad in ("many", "0", "512,-1", "1,2,3"):
        with pytest.raises(UsageError, match="--input-tokens: expected MEAN"):
            parse_mean_std(bad, "--input-tokens")


def test_parse_values() -> None:
    assert parse_values("1, 2,4.5", "--rates") == (1.0, 2.0, 4.5)
    assert parse_values(None, "--rates") is None
    for bad, message in (("1,fast", "comma-separated numbers"), ("1,0", "positive numbers"), ("inf", "positive")):
        with pytest.raises(UsageError, match=f"--rates: expected {message}"):
            parse_values(bad, "--rates")
