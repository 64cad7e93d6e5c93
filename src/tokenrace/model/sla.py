"""sweep.json's SLA and goodput search: the objectives, the boundary found and each step's verdict,
and the plan the sweep ran (docs/sweep.md, "SLA search"). An objective and a step's check of it are
claim.json's models (`Expectation`, `ConditionCheck`): the same shapes in both files.

Numbers the sweep was given keep the JSON type they were given in (`Number`): a concurrency ramp's
values 1, 2, 4 are written as integers, a rate of 2.5 as a float, exactly as before these models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import _Model
from tokenrace.model.claim import Expectation

Number = float | int  # as the user or the sweep gave it (a whole concurrency stays an integer)
SearchKind = Literal["concurrency", "rate"]


class SlaPoint(_Model):
    """The highest passing or the lowest failing load: the value (under the search's name, the other
    key absent), whether its verdict was certain, and how many runs were pooled there."""

    concurrency: float | None = Field(default=None, exclude_if=lambda v: v is None)
    rate: float | None = Field(default=None, exclude_if=lambda v: v is None)
    certain: bool = False
    runs: int = 0

    def load(self, kind: SearchKind) -> float | None:
        return self.rate if kind == "rate" else self.concurrency


class SlaStep(_Model):
    """One step of the search: its value and its pooled verdict."""

    step: str
    value: float | None = None
    passed: bool | None = None
    certain: bool | None = None


class SlaSection(_Model):
    """sweep.json's `sla`: what the search judged and where the boundary lies."""

    objectives: list[Expectation] = Field(default_factory=list)
    search: SearchKind = "concurrency"
    highest_passing: SlaPoint | None = None
    lowest_failing: SlaPoint | None = None
    reason: str | None = None  # converged | max_steps | no_passing_value | no_failing_value | running | interrupted
    steps: list[SlaStep] = Field(default_factory=list)


class SweepPlanSection(_Model):
    """sweep.json's `plan`: the sweep's settings as it ran them (sweep/runner.py's SweepPlan).

    Every field may be missing from an older file."""

    kind: str | None = None
    values: list[Number] | None = None
    gain_threshold: Number | None = None
    patience: int | None = None
    max_error_rate: Number | None = None
    stop_early: bool | None = None
    requests_per_worker: int | None = None
    attainment: Number | None = None
    start_rate: Number | None = None
    tolerance: Number | None = None
    max_probes: int | None = None
    objectives: list[Expectation] | None = None
    search: str | None = None
    repeats: int | None = None
    max_value: Number | None = None
    confidence: Number | None = None
    min_requests: int | None = None
    offline: bool | None = None  # a last step with every request in flight at once (--offline)
