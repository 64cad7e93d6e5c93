"""sweep.json's SLA and goodput search: the objectives, the boundary found, each step's verdict and
each objective's check, and the plan the sweep ran (docs/sweep.md, "SLA search").

Numbers the sweep was given keep the JSON type they were given in (`Number`): a concurrency ramp's
values 1, 2, 4 are written as integers, a rate of 2.5 as a float, exactly as before these models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenrace.model.base import _Model

Number = float | int  # as the user or the sweep gave it (a whole concurrency stays an integer)
SearchKind = Literal["concurrency", "rate"]


class SlaObjective(_Model):
    """One objective as parsed (figures/objectives.py): figure, statistic, comparison and limit."""

    figure: str
    stat: str | None = None  # None for a share or a whole-run rate
    op: Literal["<=", "<", ">=", ">"]
    limit: float  # in the figure's base unit (ms, tok/s, req/s, a share in [0, 1])
    text: str  # as the user wrote it
    guard: bool = False  # decides pass or fail but never makes a verdict unclear (the error rate)


class ObjectiveCheck(_Model):
    """One objective judged on one value's pooled runs: the figure, its 95 % interval, the verdict."""

    objective: str  # the objective as written
    name: str  # figure_stat, e.g. ttft_p99
    value: float | None = None  # None: the figure is undefined (no succeeded request)
    ci_low: float | None = None
    ci_high: float | None = None
    held: bool | None = None
    clear: bool = False  # the whole interval lies on the value's side of the limit


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

    objectives: list[SlaObjective] = Field(default_factory=list)
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
    objectives: list[SlaObjective] | None = None
    search: str | None = None
    repeats: int | None = None
    max_value: Number | None = None
