"""Objectives and their checks as sweep.json (`steps[].checks`, `sla.objectives`) and claim.json
(`expectations`, `conditions[].checks`) keep them; `figures.objectives` makes both."""

from __future__ import annotations

from typing import Literal

from tokenrace.model.base import _Model


class SavedObjective(_Model):
    """One objective: a figure, its statistic, a comparison and a limit in the figure's base unit
    (ms, tok/s, req/s, or a share in [0, 1]), and the text the user wrote."""

    figure: str
    stat: str | None = None  # None for a share or a whole-run rate
    op: Literal["<=", "<", ">=", ">"]
    limit: float
    text: str
    guard: bool = False  # decides pass or fail, never makes a verdict unclear (the error rate of a search)


class SavedCheck(_Model):
    """One objective judged on one run (or several pooled): the figure, its 95 % interval, whether it
    held (None: undefined, no request succeeded), and whether the interval was clear of the limit."""

    objective: str  # the objective's text
    name: str  # figure_stat, e.g. ttft_p99
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    held: bool | None = None
    clear: bool = False
