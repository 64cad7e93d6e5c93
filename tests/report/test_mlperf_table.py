"""The table of LoadGen's figures beside tokenrace's, and what its notes say of a difference."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tokenrace.figures.mlperf import Agreement
from tokenrace.report.mlperf import agreement_table


def result(failed: int) -> Any:
    rows = [Agreement("TTFT p50", 21.6, 20.5, 21.3), Agreement("TPOT p50", 4.01, 4.00)]
    return SimpleNamespace(agreement=rows, failed=failed)


def test_a_difference_over_a_millisecond_is_named() -> None:
    notes = agreement_table(result(0)).notes
    assert notes[-1] == "they disagree by more than 1 ms: TTFT p50 by +1.100 ms"


def test_failed_requests_are_named_as_the_reason_the_sides_differ() -> None:
    """LoadGen counts a failed request at the moment it failed; tokenrace's percentiles leave it out."""
    notes = agreement_table(result(30)).notes
    assert notes[-1].startswith("30 of the requests failed: LoadGen counts each as answered when it failed")
