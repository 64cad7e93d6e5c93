"""Which of a run's tail percentiles its requests can bound (docs/metrics.md, "Intervals").

The summary prints p90, p95 and p99 of every latency. A percentile from fewer requests than the
order-statistic rule needs has no upper bound at the confidence: its value is little more than the
largest of a few requests. The run says so, with the count that would bound it, rather than let a
p99 from ten requests read like a measured tail.
"""

from __future__ import annotations

from tokenrace.model.summary import Metrics, RunWarning
from tokenrace.stats import CONFIDENCE, requests_needed

TAILS = (("p99", 0.99), ("p95", 0.95), ("p90", 0.90))


def tail_warning(metrics: Metrics, confidence: float = CONFIDENCE) -> RunWarning | None:
    """`stats.tail_unbounded` when the run's succeeded requests cannot bound its p99 (and which other
    tails they cannot bound either); None when they can."""
    n = metrics.e2e_ms.count or metrics.ttft_ms.count
    if not n:
        return None
    unbounded = [(name, requests_needed(q, confidence)) for name, q in TAILS if n < requests_needed(q, confidence)]
    if not unbounded:
        return None
    parts = ", ".join(f"{name} ({needed} needed)" for name, needed in unbounded)
    return RunWarning(
        code="stats.tail_unbounded",
        message=(
            f"{n} requests cannot bound the tail at {confidence * 100:g} % confidence: {parts} have no upper "
            "bound, so each is little more than the largest of a few requests; run more requests to bound them"
        ),
        figures={"requests": n, "confidence": confidence, **{f"needed_{name}": needed for name, needed in unbounded}},
    )
