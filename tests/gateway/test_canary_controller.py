"""The canary controller's decisions, on synthetic samples and an explicit clock."""

from __future__ import annotations

import pytest

from tokenrace.gateway.canary import Canary, Sample, wilson_lower
from tokenrace.gateway.config import CanaryConfig

SLO = {"error_rate": 0.05, "ttft_p95_ms": 500, "tpot_p95_ms": 50}


def state(c: Canary) -> str:
    """The canary's state, read fresh: a `c.state == ...` check would make mypy keep that narrowing
    past the admin calls that change it."""
    return c.state


def make(**fields: object) -> Canary:
    cfg = CanaryConfig.model_validate(
        {"backend": "new", "steps": [1, 5, 25, 100], "hold_s": 10, "min_requests": 20, "slo": SLO, **fields}
    )
    return Canary("m", cfg, now=0.0)


def feed(
    c: Canary, arm: str, t0: float, t1: float, n: int, ok: bool = True, ttft_ms: float = 100, tpot_ms: float = 10
) -> None:
    for i in range(n):
        t = t0 + (t1 - t0) * i / max(1, n)
        c.record(arm, Sample(t, ok, ttft_ms / 1000 if ok else None, tpot_ms / 1000 if ok else None, 0.5))  # type: ignore[arg-type]


def test_advances_step_by_step_on_healthy_numbers_then_promotes() -> None:
    c = make()
    assert c.weight == 1 and c.decisions[-1].action == "start"
    t = 0.0
    for expected in (5, 25, 100):
        feed(c, "canary", t + 0.5, t + 9.9, 30)
        feed(c, "baseline", t + 0.5, t + 9.9, 100)
        assert c.tick(t + 5) is None  # still holding
        decision = c.tick(t + 10.1)
        assert decision is not None and decision.action == "advance" and decision.to_weight == expected
        assert decision.numbers.canary.requests == 30
        assert decision.numbers.canary.ttft_p95_ms == pytest.approx(100)
        t += 10.1
    feed(c, "canary", t + 0.5, t + 9.9, 30)
    decision = c.tick(t + 10.1)
    assert decision is not None and decision.action == "promote" and c.state == "promoted" and c.weight == 100


def test_rolls_back_at_once_on_an_error_rate_breach_with_the_numbers() -> None:
    c = make()
    feed(c, "canary", 0, 2, 15, ok=True)
    feed(c, "canary", 2, 3, 10, ok=False)  # 10/25 = 40 %, lower bound well above 5 %
    decision = c.tick(3.0)  # long before the hold ends
    assert decision is not None and decision.action == "rollback" and c.weight == 0 and c.state == "rolled_back"
    assert decision.from_weight == 1
    assert "error_rate vs SLO: 0.4" in decision.reason
    assert decision.numbers.canary.errors == 10 and decision.numbers.canary.error_rate_low95 > 0.05
    assert c.tick(4.0) is None  # stays rolled back


def test_one_unlucky_error_is_not_a_breach_but_holds() -> None:
    c = make()
    feed(c, "canary", 0, 9, 19, ok=True)
    feed(c, "canary", 9, 9.5, 1, ok=False)  # 1/20 = 5 %: the lower bound is ~1 %
    assert c.tick(9.6) is None
    feed(c, "canary", 9.6, 9.9, 1, ok=False)  # 2/21 ~ 9.5 % > SLO on the point estimate
    decision = c.tick(10.5)
    assert decision is not None and decision.action == "hold" and c.weight == 1


def test_rolls_back_on_a_latency_slo_breach() -> None:
    c = make()
    feed(c, "canary", 0, 2, 25, ttft_ms=900)
    decision = c.tick(2.5)
    assert decision is not None and decision.action == "rollback"
    assert "ttft_p95_ms vs SLO: 900 ms vs limit 500 ms" in decision.reason


def test_rolls_back_when_much_slower_than_the_baseline() -> None:
    c = make(slo={"error_rate": 0.05})
    feed(c, "baseline", 0, 2, 100, tpot_ms=10)
    feed(c, "canary", 0, 2, 25, tpot_ms=40)  # 4x the baseline, 30 ms over
    decision = c.tick(2.5)
    assert decision is not None and decision.action == "rollback"
    assert "tpot_p95_ms vs baseline: 40 ms vs limit 20 ms (baseline 10 ms)" in decision.reason


def test_small_absolute_differences_are_within_the_margin() -> None:
    c = make(slo={})
    feed(c, "baseline", 0, 9, 100, ttft_ms=10)
    feed(c, "canary", 0, 9, 25, ttft_ms=18)  # 1.8x, but only 8 ms over (margin 10 ms)
    assert c.tick(5) is None
    decision = c.tick(10.5)
    assert decision is not None and decision.action == "advance"


def test_holds_without_enough_canary_requests() -> None:
    c = make()
    feed(c, "canary", 1, 9, 5)
    decision = c.tick(10.5)
    assert decision is not None and decision.action == "hold" and "only 5 canary requests" in decision.reason
    assert c.tick(11) is None  # said once per step
    feed(c, "canary", 11, 12, 20)
    decision = c.tick(12.5)
    assert decision is not None and decision.action == "advance"


def test_open_breaker_on_the_canary_rolls_back() -> None:
    c = make()
    decision = c.tick(1.0, breaker_open="new: 5 consecutive failures (last: connect)")
    assert decision is not None and decision.action == "rollback" and "breaker open" in decision.reason


def test_admin_actions() -> None:
    c = make()
    assert c.admin("pause", 1.0).action == "pause" and state(c) == "paused"
    feed(c, "canary", 0, 9, 30)
    assert c.tick(20.0) is None  # paused: no advance
    with pytest.raises(ValueError, match="already"):
        c.admin("resume", 20.0) and c.admin("resume", 20.0)
    assert state(c) == "running" and c.step_started == 20.0
    decision = c.admin("promote", 21.0)
    assert decision.to_weight == 100 and decision.by == "admin" and state(c) == "promoted"
    assert c.admin("rollback", 22.0).to_weight == 0
    restart = c.admin("resume", 23.0)
    assert restart.to_weight == 1 and state(c) == "running" and c.step == 0
    with pytest.raises(ValueError, match="unknown action"):
        c.admin("explode", 24.0)


def test_paused_canary_still_rolls_back_on_breach() -> None:
    c = make()
    c.admin("pause", 0.5)
    feed(c, "canary", 1, 2, 25, ok=False)
    decision = c.tick(2.5)
    assert decision is not None and decision.action == "rollback"


def test_wilson_lower_bound() -> None:
    assert wilson_lower(0, 0) is None
    assert wilson_lower(0, 100) == 0.0
    assert 0.01 < wilson_lower(1, 20) < 0.02
    assert wilson_lower(20, 20) > 0.85
