"""Circuit breaker transitions, driven by an explicit clock."""

from __future__ import annotations

from typing import cast

from tokenrace.gateway.breaker import Breaker
from tokenrace.gateway.config import BreakerConfig


def make(**fields: object) -> Breaker:
    return Breaker("vllm", BreakerConfig.model_validate({"failures": 3, "open_s": 10, "error_rate": None, **fields}))


def test_opens_after_n_consecutive_failures_and_says_why_and_until_when() -> None:
    b = make()
    for t in (1.0, 2.0):
        assert b.allow(t)
        assert b.record(False, t, "5xx") is None
    assert b.record(True, 2.5) is None  # a success resets the run
    for t in (3.0, 4.0):
        b.record(False, t, "5xx")
    transition = b.record(False, 5.0, "connect")
    assert transition is not None and (transition.old, transition.new) == ("closed", "open")
    assert b.reason == "3 consecutive failures (last: connect)"
    assert b.open_until == 15.0
    assert not b.allow(14.9)
    snap = b.snapshot(6.0)
    assert snap.state == "open" and snap.open_until_unix is not None and str(snap.reason).startswith("3 consecutive")


def test_half_open_admits_probes_then_closes_on_success() -> None:
    b = make(probes=1)
    for t in range(3):
        b.record(False, float(t), "5xx")
    # cast: mypy would keep this narrowing past the calls below that change it
    assert cast(str, b.state) == "open"
    assert b.allow(13.0)  # open_s passed: one probe goes through
    assert b.state == "half_open"
    assert not b.allow(13.1)  # only `probes` at a time
    transition = b.record(True, 13.5)
    assert transition is not None and transition.new == "closed"
    assert b.allow(13.6) and b.consecutive == 0


def test_a_failed_probe_opens_again_for_another_period() -> None:
    b = make()
    for t in range(3):
        b.record(False, float(t), "5xx")
    assert b.allow(20.0)
    transition = b.record(False, 20.5, "timeout")
    assert transition is not None and transition.new == "open" and b.reason == "probe failed (timeout)"
    assert b.open_until == 30.5 and not b.allow(30.0) and b.allow(30.6)


def test_error_rate_over_a_window_opens_it() -> None:
    b = make(failures=100, error_rate=0.5, window_s=10, min_requests=10)
    outcomes = [True, False] * 4 + [True]  # 4/9 fail: below min_requests and below the rate
    for i, ok in enumerate(outcomes):
        b.record(ok, i * 0.1)
    assert b.state == "closed"
    transition = b.record(False, 1.0, "5xx")  # 5/10 = 0.5
    assert transition is not None and transition.new == "open"
    assert b.reason.startswith("error rate 0.50 >= 0.5 over the last 10 s (5/10 requests)")


def test_old_outcomes_leave_the_window() -> None:
    b = make(failures=100, error_rate=0.5, window_s=10, min_requests=4)
    for t in (0.0, 0.1, 0.2):
        b.record(False, t)
    for t in (20.0, 20.1, 20.2):
        b.record(True, t)
    assert b.record(False, 20.3) is None  # only 1/4 in the window: the old failures aged out
    assert b.window_stats() == (4, 1)


def test_an_admitted_request_without_verdict_frees_the_probe() -> None:
    b = make()
    for t in range(3):
        b.record(False, float(t))
    assert b.allow(15.0) and not b.allow(15.1)
    b.release_probe()
    assert b.allow(15.2)
