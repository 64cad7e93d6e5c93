"""A run says which tail percentiles its requests cannot bound, with the count that would."""

from __future__ import annotations

from tokenrace.figures.tails import tail_warning
from tokenrace.model.stats import Stats
from tokenrace.model.summary import Metrics


def metrics(n: int) -> Metrics:
    return Metrics(ttft_ms=Stats(count=n), e2e_ms=Stats(count=n))


def test_ten_requests_bound_no_tail() -> None:
    w = tail_warning(metrics(10))
    assert w is not None and w.code == "stats.tail_unbounded"
    assert w.figures == {"requests": 10, "confidence": 0.95, "needed_p99": 299, "needed_p95": 59, "needed_p90": 29}
    assert "p99 (299 needed)" in w.message


def test_enough_requests_bound_the_p99() -> None:
    assert tail_warning(metrics(299)) is None
    w = tail_warning(metrics(100))
    assert w is not None and w.figures == {"requests": 100, "confidence": 0.95, "needed_p99": 299}


def test_the_confidence_sets_the_count() -> None:
    w = tail_warning(metrics(300), confidence=0.99)
    assert w is not None and w.figures["needed_p99"] == 459
    assert tail_warning(metrics(0)) is None  # no request: nothing to bound
