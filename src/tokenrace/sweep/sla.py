"""The SLA search: the highest load (concurrency or request rate) at which every objective holds.

Pure and deterministic given what each measurement says (docs/sweep.md, "SLA search"):

1. Bracket: measure the start value; double while every objective holds, halve (rates) while one
   does not, until one value passed and a higher one failed, or the limit of the search is reached.
2. Bisect between the highest passing and the lowest failing value until they are adjacent
   (concurrency) or within the tolerance (rates: upper / lower - 1 <= tolerance).
3. Make the boundary certain: while the highest passing or the lowest failing value has an objective
   whose interval still straddles its limit, measure it again (its runs are pooled) - at most
   `repeats` more times each. A value whose pooled verdict flips moves the boundary and the search
   goes on. What is still unclear then is reported as `certain: false`.

The search assumes that more load never makes an objective easier to meet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

SearchKind = Literal["concurrency", "rate"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one value's pooled runs say: every objective held, and whether each was clear."""

    passed: bool
    certain: bool


Measure = Callable[[float], Awaitable[Verdict]]


@dataclass(slots=True)
class Boundary:
    verdicts: dict[float, Verdict] = field(default_factory=dict)
    runs: dict[float, int] = field(default_factory=dict)  # runs pooled at each value
    reason: str = "converged"  # converged | max_steps | no_passing_value | no_failing_value

    @property
    def highest_passing(self) -> float | None:
        failing = self.lowest_failing
        passing = [v for v, d in self.verdicts.items() if d.passed and (failing is None or v < failing)]
        return max(passing) if passing else None

    @property
    def lowest_failing(self) -> float | None:
        failing = [v for v, d in self.verdicts.items() if not d.passed]
        return min(failing) if failing else None


@dataclass(frozen=True, slots=True)
class SearchRule:
    kind: SearchKind
    start: float
    max_value: float
    tolerance: float = 0.10  # rates only
    min_value: float = 0.01  # rates only
    max_steps: int = 16  # every run counts, repeats included
    repeats: int = 2  # extra runs at each boundary value, at most


async def search(measure: Measure, rule: SearchRule) -> Boundary:
    b = Boundary()

    async def run(value: float) -> None:
        b.verdicts[value] = await measure(value)
        b.runs[value] = b.runs.get(value, 0) + 1

    def steps() -> int:
        return sum(b.runs.values())

    value = _clamp(rule.start, rule)
    while steps() < rule.max_steps:
        await run(value)
        nxt = _next_value(b, rule)
        if nxt is None:
            break
        value = nxt
    unfinished = steps() >= rule.max_steps and _next_value(b, rule) is not None
    b.reason = "max_steps" if unfinished else _reason(b)
    return b


def _next_value(b: Boundary, rule: SearchRule) -> float | None:
    """The next value to measure: bracket, bisect, or repeat an unclear boundary value; None when done."""
    lo, hi = b.highest_passing, b.lowest_failing
    if hi is None:  # nothing failed yet: go up
        top = max(b.verdicts)
        up = _clamp(top * 2, rule)
        if up > top:
            return up
    elif lo is None:  # nothing passed yet: go down
        bottom = min(b.verdicts)
        down = _clamp(bottom / 2, rule)
        if down < bottom:
            return down
    elif not _adjacent(lo, hi, rule):
        return _clamp((lo + hi) / 2, rule, down=True)
    for v in (lo, hi):  # the boundary, made certain
        if v is not None and not b.verdicts[v].certain and b.runs[v] <= rule.repeats:
            return v
    return None


def _adjacent(lo: float, hi: float, rule: SearchRule) -> bool:
    if rule.kind == "concurrency":
        return hi - lo <= 1
    return hi / lo - 1 <= rule.tolerance


def _clamp(value: float, rule: SearchRule, down: bool = False) -> float:
    if rule.kind == "concurrency":
        whole = int(value) if down else round(value)
        return float(max(1, min(int(rule.max_value), whole)))
    return max(rule.min_value, min(rule.max_value, round(value, 4)))


def _reason(b: Boundary) -> str:
    if b.highest_passing is None:
        return "no_passing_value"
    if b.lowest_failing is None:
        return "no_failing_value"
    return "converged"
