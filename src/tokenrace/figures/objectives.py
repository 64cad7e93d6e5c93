"""Objectives on a run's figures ("ttft_p99<=500ms", "output_tok_s_per_user>=150"): parsed, checked
for sense, and judged against one run's requests with a bootstrap interval (docs/sweep.md, "SLA search").

An objective names a figure, a statistic, a comparison and a limit. Per-request figures (TTFT, TPOT,
E2E, ITL, the per-user output speed) are judged by a statistic of the measured, succeeded requests:
a percentile (`_p50`, `_p90`, `_p95`, `_p99`) or `_mean`; without one, the median. Shares (the error
rate, goodput attainment) are judged with Wilson's interval; whole-run rates (output tokens/s,
requests/s) are one figure per run and have no interval.

An objective *holds* when the figure meets the limit. It is *clear* when the figure's 95 % interval
lies wholly on the same side of the limit as the figure itself: more requests would not change the
answer. A figure with no interval is clear when it is defined (a whole-run rate is one number).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tokenrace.errors import InvalidInput
from tokenrace.model.claim import ConditionCheck, Expectation
from tokenrace.stats import statistic_ci, wilson

Kind = Literal["time", "speed", "rate", "share"]
Op = Literal["<=", "<", ">=", ">"]

# figure -> (kind, what it is); per-request figures have a statistic, the others none.
FIGURES: dict[str, tuple[Kind, str]] = {
    "ttft": ("time", "time to first token, ms"),
    "tpot": ("time", "time per output token after the first, ms"),
    "e2e": ("time", "request latency, ms"),
    "itl": ("time", "gap between content chunks, ms"),
    "output_tok_s_per_user": ("speed", "one request's output tokens/s while streaming (1000 / TPOT)"),
    "output_tok_s": ("rate", "output tokens/s of the whole run"),
    "requests_per_s": ("rate", "succeeded requests/s of the whole run"),
    "error_rate": ("share", "failed ÷ measured requests"),
    "goodput": ("share", "share of measured requests within every SLO"),
}
PER_REQUEST = ("ttft", "tpot", "e2e", "itl", "output_tok_s_per_user")
STATS = ("p50", "p90", "p95", "p99", "mean")
UNITS: dict[Kind, dict[str, float]] = {
    "time": {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 0.001},
    "speed": {"": 1.0, "tok/s": 1.0, "tokens/s": 1.0},
    "rate": {"": 1.0, "tok/s": 1.0, "tokens/s": 1.0, "req/s": 1.0},
    "share": {"": 1.0, "%": 0.01},
}
UNIT_NAMES = {"time": "ms or s", "speed": "tok/s", "rate": "tok/s or req/s", "share": "a share (0.95) or %"}
OPS: dict[Op, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
_ITEM = re.compile(r"^([a-z][a-z0-9_]*?)\s*(<=|>=|<|>|=<|=>)\s*([-+0-9.eE]+)\s*([a-z/%]*)$")


@dataclass(frozen=True, slots=True)
class Objective:
    figure: str
    stat: str | None  # None for a share or a whole-run rate
    op: Op
    limit: float  # in the figure's base unit (ms, tok/s, req/s, a share in [0, 1])
    text: str  # as the user wrote it
    # A guard (the error rate added to every search) decides pass or fail but never makes a verdict
    # unclear: proving a small error rate takes hundreds of requests, and a step is not run for that.
    guard: bool = False

    @property
    def name(self) -> str:
        return f"{self.figure}_{self.stat}" if self.stat else self.figure

    @property
    def kind(self) -> Kind:
        return FIGURES[self.figure][0]

    @property
    def upper(self) -> bool:
        """The limit is a ceiling (the figure must stay at or below it)."""
        return self.op in ("<=", "<")

    def holds(self, value: float) -> bool:
        return OPS[self.op](value, self.limit)

    def saved(self) -> Expectation:
        """As claim.json (`expectations`) and sweep.json (`sla.objectives`) keep it."""
        return Expectation(
            figure=self.figure, stat=self.stat, op=self.op, limit=self.limit, text=self.text, guard=self.guard
        )


def parse_objectives(text: str, param: str) -> tuple[Objective, ...]:
    """'ttft_p99<=500ms,tpot_p50<=50ms' -> objectives; InvalidInput(param, ...) for anything wrong."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise InvalidInput(param, "give at least one objective, e.g. ttft_p99<=500ms")
    objectives = tuple(parse_objective(item, param) for item in items)
    check_consistent(objectives, param)
    return objectives


def parse_objective(item: str, param: str) -> Objective:
    m = _ITEM.match(item.strip().lower())
    if m is None:
        raise InvalidInput(param, f"{item!r} is not FIGURE<=LIMIT (e.g. ttft_p99<=500ms, output_tok_s_per_user>=150)")
    name, op, number, unit = m.groups()
    figure, stat = split_name(name, param, item)
    kind = FIGURES[figure][0]
    scale = UNITS[kind].get(unit)
    if scale is None:
        raise InvalidInput(param, f"{item!r}: the unit {unit!r} does not fit {figure} (use {UNIT_NAMES[kind]})")
    try:
        limit = float(number) * scale
    except ValueError:
        raise InvalidInput(param, f"{item!r}: {number!r} is not a number") from None
    if not math.isfinite(limit) or limit < 0:
        raise InvalidInput(param, f"{item!r}: the limit must be a number of 0 or more")
    if kind == "share" and limit > 1:
        raise InvalidInput(param, f"{item!r}: a share lies between 0 and 1 (or 0 and 100 %)")
    canonical: Op = {"=<": "<=", "=>": ">="}.get(op, op)  # type: ignore[assignment]
    return Objective(figure, stat, canonical, limit, item.strip())


def split_name(name: str, param: str, item: str) -> tuple[str, str | None]:
    """'ttft_p99' -> ('ttft', 'p99'); 'ttft' -> ('ttft', 'p50'); 'error_rate' -> ('error_rate', None)."""
    if name in FIGURES:
        return name, ("p50" if name in PER_REQUEST else None)
    head, _, tail = name.rpartition("_")
    if head in PER_REQUEST and tail in STATS:
        return head, tail
    if head in FIGURES:
        raise InvalidInput(param, f"{item!r}: {head} has no statistic {tail!r} (use {', '.join(STATS)})")
    known = ", ".join(sorted(FIGURES))
    raise InvalidInput(param, f"{item!r}: unknown figure {name!r} (known: {known}; latencies take _p50 ... _p99)")


def check_consistent(objectives: Sequence[Objective], param: str) -> None:
    """Refuse objectives no run could meet together: a floor above a ceiling on one figure, also
    across percentiles (p50 <= p99 always, so p50 >= 300 and p99 <= 200 contradict)."""
    for a in objectives:
        for b in objectives:
            if a.figure != b.figure or a.upper or not b.upper:
                continue  # a is a floor, b a ceiling, on the same figure
            if not _can_order(a, b):
                continue
            strict = a.op == ">" or b.op == "<"
            if a.limit > b.limit or (strict and a.limit == b.limit):
                raise InvalidInput(param, f"{a.text!r} and {b.text!r} contradict each other")


def _can_order(floor: Objective, ceiling: Objective) -> bool:
    """Whether floor's statistic is always <= ceiling's (the same one, or a lower percentile)."""
    if floor.stat == ceiling.stat:
        return True
    order = {"p50": 50, "p90": 90, "p95": 95, "p99": 99}
    if floor.stat in order and ceiling.stat in order:
        lo, hi = order[floor.stat], order[ceiling.stat]
        # For a speed (1000 / TPOT) the order is the same: a higher percentile of speed is higher.
        return lo <= hi
    return False


# --- judging one run ------------------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    """What objectives are judged on: one run's measured requests (or several runs pooled)."""

    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    itl_ms: list[list[float]] = field(default_factory=list)  # per request: its gaps
    measured: int = 0
    failed: int = 0
    within_slo: int | None = None
    output_tok_s: list[float] = field(default_factory=list)  # one per run pooled
    requests_per_s: list[float] = field(default_factory=list)

    def pooled(self, other: Sample) -> Sample:
        within = None if self.within_slo is None or other.within_slo is None else self.within_slo + other.within_slo
        return Sample(
            self.ttft_ms + other.ttft_ms,
            self.tpot_ms + other.tpot_ms,
            self.e2e_ms + other.e2e_ms,
            self.itl_ms + other.itl_ms,
            self.measured + other.measured,
            self.failed + other.failed,
            within,
            self.output_tok_s + other.output_tok_s,
            self.requests_per_s + other.requests_per_s,
        )


@dataclass(frozen=True, slots=True)
class Check:
    objective: Objective
    value: float | None
    low: float | None
    high: float | None
    held: bool | None  # None: the figure is undefined (no succeeded request)
    clear: bool

    def saved(self) -> ConditionCheck:
        """As claim.json (`conditions[].checks`) and sweep.json (`steps[].checks`) keep it."""
        return ConditionCheck(
            objective=self.objective.text,
            name=self.objective.name,
            value=_r(self.value),
            ci_low=_r(self.low),
            ci_high=_r(self.high),
            held=self.held,
            clear=self.clear,
        )


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def judge(objective: Objective, sample: Sample) -> Check:
    value, low, high = _figure(objective, sample)
    if value is None:
        return Check(objective, None, None, None, None, False)
    held = objective.holds(value)
    if low is None or high is None:
        clear = objective.kind == "rate"
    else:
        # Clear: the whole interval is on the value's side of the limit.
        clear = all(objective.holds(x) == held for x in (low, high))
    return Check(objective, value, low, high, held, clear)


def judge_all(objectives: Sequence[Objective], sample: Sample) -> list[Check]:
    return [judge(o, sample) for o in objectives]


def _figure(o: Objective, s: Sample) -> tuple[float | None, float | None, float | None]:
    if o.figure == "error_rate":
        return _share(s.failed, s.measured)
    if o.figure == "goodput":
        return (None, None, None) if s.within_slo is None else _share(s.within_slo, s.measured)
    if o.figure in ("output_tok_s", "requests_per_s"):
        values = s.output_tok_s if o.figure == "output_tok_s" else s.requests_per_s
        return (sum(values) / len(values) if values else None), None, None
    assert o.stat is not None
    if o.figure == "itl":
        return statistic_ci([g for g in s.itl_ms if g], o.stat, grouped=True)
    if o.figure == "output_tok_s_per_user":
        speeds = [1000.0 / t for t in s.tpot_ms if t > 0]
        return statistic_ci(speeds, o.stat)
    return statistic_ci({"ttft": s.ttft_ms, "tpot": s.tpot_ms, "e2e": s.e2e_ms}[o.figure], o.stat)


def _share(k: int, n: int) -> tuple[float | None, float | None, float | None]:
    interval = wilson(k, n) if n else None
    if interval is None:
        return None, None, None
    return k / n, interval[0], interval[1]


def all_held(checks: Sequence[Check]) -> bool:
    return all(c.held is True for c in checks)


def all_clear(checks: Sequence[Check]) -> bool:
    return all(c.clear for c in checks if not c.objective.guard)


def error_guard(max_error_rate: float) -> Objective:
    """`error_rate <= max_error_rate`, as a guard (see Objective.guard)."""
    return dataclasses.replace(parse_objective(f"error_rate<={max_error_rate}", "max_error_rate"), guard=True)


LABELS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "e2e": "E2E",
    "itl": "ITL",
    "output_tok_s_per_user": "the output speed per user",
    "output_tok_s": "the output throughput",
    "requests_per_s": "the request rate",
    "error_rate": "the error rate",
    "goodput": "goodput",
}


def unit_of(o: Objective) -> str:
    return {"time": "ms", "speed": "tok/s", "rate": "/s", "share": ""}[o.kind]


def describe_check(c: Check) -> str:
    """'TTFT p99 is 412 ms [395, 431]' - for verdict sentences."""
    o = c.objective
    label = LABELS.get(o.figure, o.figure)
    stat = f" {o.stat}" if o.stat and o.stat != "mean" else (" mean" if o.stat == "mean" else "")
    if c.value is None:
        return f"{label}{stat} is undefined (no request succeeded)"
    if o.kind == "share":
        value = f"{c.value * 100:.1f} %"
        ci = f" [{c.low * 100:.1f}, {c.high * 100:.1f}]" if c.low is not None and c.high is not None else ""
    else:
        value = f"{_fmt(c.value)} {unit_of(o)}".rstrip()
        ci = f" [{_fmt(c.low)}, {_fmt(c.high)}]" if c.low is not None and c.high is not None else ""
    return f"{label}{stat} is {value}{ci}"


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def describe_saved_check(c: ConditionCheck) -> str:
    """`describe_check` of a check as saved (`Check.saved()`)."""
    o = parse_objective(c.objective, "expect")
    return describe_check(Check(o, c.value, c.ci_low, c.ci_high, bool(c.held), False))
