"""Turn item results into scores: accuracy per suite and overall, errors apart, and speed."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable

from tokenrace.quality.models import Accuracy, ItemResult, Score, Speed
from tokenrace.stats import wilson


def accuracy_of(right: int, n: int) -> Accuracy:
    """right / n with Wilson's 95 % interval; None (and n 0) when nothing was judged."""
    ci = wilson(right, n)
    if ci is None:
        return Accuracy(value=None, ci_low=None, ci_high=None, n=0)
    return Accuracy(value=right / n, ci_low=ci[0], ci_high=ci[1], n=n)


def score(items: Iterable[ItemResult]) -> Score:
    items = list(items)
    right = sum(1 for i in items if i.verdict == "right")
    wrong = sum(1 for i in items if i.verdict == "wrong")
    kinds = Counter(i.error_kind or "unknown" for i in items if i.verdict == "error")
    return Score(
        accuracy=accuracy_of(right, right + wrong),
        right=right,
        wrong=wrong,
        errors=sum(kinds.values()),
        errors_by_kind=dict(sorted(kinds.items())),
    )


def by_suite(items: Iterable[ItemResult]) -> dict[str, Score]:
    groups: dict[str, list[ItemResult]] = {}
    for i in items:
        groups.setdefault(i.suite, []).append(i)
    return {name: score(group) for name, group in groups.items()}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def speed(items: Iterable[ItemResult]) -> Speed:
    ok = [i for i in items if i.verdict != "error"]
    tokens = [i.output_tokens for i in ok if i.output_tokens is not None and i.e2e_ms is not None]
    seconds = sum(i.e2e_ms for i in ok if i.output_tokens is not None and i.e2e_ms is not None) / 1000
    return Speed(
        ttft_ms_p50=_median([i.ttft_ms for i in ok if i.ttft_ms is not None]),
        tpot_ms_p50=_median([i.tpot_ms for i in ok if i.tpot_ms is not None]),
        e2e_ms_p50=_median([i.e2e_ms for i in ok if i.e2e_ms is not None]),
        output_tokens_per_s=round(sum(tokens) / seconds, 3) if tokens and seconds > 0 else None,
        requests=len(ok),
    )
