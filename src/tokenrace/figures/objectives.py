"""Objectives on a run's figures ("ttft_p99<=500ms", "ttft<=300ms@99%", "output_tok_s_per_user>=150"):
parsed, checked for sense, and judged against one run's requests (docs/claim.md, "Three outcomes";
docs/metrics.md, "Intervals").

An objective names a figure, a statistic, a comparison and a limit. Per-request figures (TTFT, TPOT,
E2E, ITL, the per-user output speed) are judged by a statistic of the measured, succeeded requests:
a percentile (`_p50`, `_p90`, `_p95`, `_p99`) or `_mean`; without one, the median; or an attainment
(`@99%`: at least that share of requests within the limit, judged as the percentile it names).
Shares (the error rate, goodput attainment) are judged with Wilson's interval; whole-run rates
(output tokens/s, requests/s) are one figure per run and have no interval.

Every judgement has three outcomes at a confidence c (default 0.95): *held* when the bound on the
good side of the figure clears the limit, *failed* when the bound on the bad side clears it the
other way, *unproven* when neither does. Percentile bounds come from order statistics, so a
percentile that the requests cannot bound stays open: a ceiling on a percentile is LoadGen's
early-stopping test on the count of requests over the limit (tokenrace.stats.requests_needed). A
mean's bounds are the bootstrap's.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

from tokenrace.errors import InvalidInput
from tokenrace.model.claim import ConditionCheck, Expectation
from tokenrace.stats import CONFIDENCE, percentile_bounds, requests_needed, share_bounds, statistic_ci, wilson

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
    # `ttft<=300ms@99%`: the share of requests that must meet the limit (0.99). Judged as the
    # percentile it names (p99 for a ceiling, p1 of a floor's figure), shown as the share within.
    attainment: float | None = None

    @property
    def name(self) -> str:
        if self.attainment is not None:
            return f"{self.figure}@{self.attainment * 100:g}%"
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
            figure=self.figure,
            stat=self.stat,
            op=self.op,
            limit=self.limit,
            text=self.text,
            guard=self.guard,
            attainment=self.attainment,
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
    head, at, share = item.strip().lower().partition("@")
    if at:
        return _parse_attainment(item, head, share, param)
    m = _ITEM.match(head)
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


def _parse_attainment(item: str, head: str, share: str, param: str) -> Objective:
    """'ttft<=300ms@99%' -> at least 99 % of requests with TTFT <= 300 ms."""
    plain = parse_objective(head, param)
    m = _ITEM.match(head)
    if m is None or m.group(1) != plain.figure or plain.kind not in ("time", "speed"):
        raise InvalidInput(
            param, f"{item!r}: an attainment takes a per-request figure without a statistic (ttft<=300ms@99%)"
        )
    text = share.strip()
    try:
        value = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise InvalidInput(param, f"{item!r}: {share!r} is not a share (99% or 0.99)") from None
    if not 0 < value < 1:
        raise InvalidInput(param, f"{item!r}: the share must lie strictly between 0 and 100 %")
    q = value if plain.upper else 1 - value
    stat = f"p{round(q * 100, 6):g}"
    return dataclasses.replace(plain, stat=stat, attainment=value, text=item.strip())


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


Outcome = Literal["held", "failed", "unproven"]


@dataclass(frozen=True, slots=True)
class Check:
    """One objective judged on one sample. `low` and `high` are one-sided bounds at `confidence`
    (None: open, the requests cannot bound that side); `outcome` is `held` when the bound on the good
    side clears the limit, `failed` when the bound on the bad side clears it the other way, and
    `unproven` otherwise. `over` counts the requests on the wrong side of the limit and `needed` the
    requests that would show the objective held if no more of them went over (percentile
    objectives), None where that is not how the figure is decided."""

    objective: Objective
    value: float | None
    low: float | None
    high: float | None
    held: bool | None  # the figure itself meets the limit; None: undefined (no request succeeded)
    outcome: Outcome | None
    confidence: float = CONFIDENCE
    n: int = 0
    over: int | None = None
    needed: int | None = None

    @property
    def clear(self) -> bool:
        """Decided either way: more requests would not change the answer (at the confidence)."""
        return self.outcome in ("held", "failed")

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
            outcome=self.outcome,
            confidence=self.confidence,
            requests=self.n,
            over=self.over,
            needed=self.needed,
        )


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def judge(objective: Objective, sample: Sample, confidence: float = CONFIDENCE) -> Check:
    """The objective on the sample's requests: the figure, its bounds and the outcome (see Check)."""
    o = objective
    if o.kind in ("time", "speed") and o.stat != "mean":
        return _judge_percentile(o, sample, confidence)
    value, low, high, n = _figure(o, sample, confidence)
    if value is None:
        return Check(o, None, None, None, None, None, confidence)
    held = o.holds(value)
    over = _bad_count(o, sample)
    if o.guard or o.kind == "rate":
        # A guard decides but is never unproven; a whole-run rate is one measured number.
        return Check(o, value, low, high, held, "held" if held else "failed", confidence, n, over)
    return Check(o, value, low, high, held, _outcome(o, low, high), confidence, n, over)


def _bad_count(o: Objective, s: Sample) -> int | None:
    """Requests on the wrong side of a share's limit (failed ones, or those outside the SLO), for the
    verdict's comparison of two conditions; None for other figures."""
    if o.figure == "error_rate":
        return s.failed
    if o.figure == "goodput" and s.within_slo is not None:
        return s.measured - s.within_slo
    return None


def _outcome(o: Objective, low: float | None, high: float | None) -> Outcome:
    good, bad = (high, low) if o.upper else (low, high)
    if good is not None and o.holds(good):
        return "held"
    if bad is not None and not o.holds(bad):
        return "failed"
    return "unproven"


def _judge_percentile(o: Objective, s: Sample, confidence: float) -> Check:
    """A percentile (or an attainment) of a per-request figure, bounded by order statistics: the
    outcome is LoadGen's early-stopping test on the count of requests over the limit."""
    assert o.stat is not None
    q = percentile_of(o.stat)
    if o.figure == "itl":
        return _judge_itl(o, s, q, confidence)
    values = _per_request(o, s)
    if not values:
        return Check(o, None, None, None, None, None, confidence)
    b = percentile_bounds(values, q, confidence)
    assert b.value is not None
    over = sum(1 for v in values if not o.holds(v))
    outcome = _outcome(o, b.low, b.high)
    # The requests that would show it held if no more went over: a ceiling bounds the q-quantile
    # from above, a floor from below (the (1 - q)-quantile of the bad side).
    needed = None if outcome != "unproven" else requests_needed(q if o.upper else 1 - q, confidence, over)
    if o.attainment is not None:
        return _attainment_check(o, len(values), over, outcome, needed, confidence)
    return Check(o, b.value, b.low, b.high, o.holds(b.value), outcome, confidence, len(values), over, needed)


def _attainment_check(
    o: Objective, n: int, over: int, outcome: Outcome, needed: int | None, confidence: float
) -> Check:
    """`ttft<=300ms@99%` is the 99th percentile's test, shown as the share of requests within the
    limit with its exact (Clopper-Pearson) one-sided bounds; the lower bound reaches the asked share
    exactly when the percentile's upper bound is within the limit."""
    within = n - over
    low, high = share_bounds(within, n, confidence)
    value = within / n
    assert o.attainment is not None
    return Check(o, value, low, high, value >= o.attainment, outcome, confidence, n, over, needed)


def _judge_itl(o: Objective, s: Sample, q: float, confidence: float) -> Check:
    """The gaps of one request are not independent, so their order statistics bound nothing: the
    interval is the bootstrap over whole requests, and a side stays open until there are as many
    requests as the binomial rule needs for that side."""
    groups = [g for g in s.itl_ms if g]
    value, low, high = statistic_ci(groups, o.stat or "p50", grouped=True, confidence=2 * confidence - 1)
    if value is None:
        return Check(o, None, None, None, None, None, confidence)
    n = len(groups)
    high = high if n >= requests_needed(q, confidence) else None
    low = low if n >= requests_needed(1 - q, confidence) else None
    outcome = _outcome(o, low, high)
    needed = None
    if outcome == "unproven":
        needed = max(n + 1, requests_needed(q if o.upper else 1 - q, confidence))
    return Check(o, value, low, high, o.holds(value), outcome, confidence, n, None, needed)


def _per_request(o: Objective, s: Sample) -> list[float]:
    if o.figure == "output_tok_s_per_user":
        return [1000.0 / t for t in s.tpot_ms if t > 0]
    return {"ttft": s.ttft_ms, "tpot": s.tpot_ms, "e2e": s.e2e_ms}[o.figure]


def percentile_of(stat: str) -> float:
    """'p99' -> 0.99, 'p99.9' -> 0.999."""
    return float(stat.removeprefix("p")) / 100


def judge_all(objectives: Sequence[Objective], sample: Sample, confidence: float = CONFIDENCE) -> list[Check]:
    return [judge(o, sample, confidence) for o in objectives]


def _figure(o: Objective, s: Sample, confidence: float) -> tuple[float | None, float | None, float | None, int]:
    """A share, a whole-run rate or a mean, with its one-sided bounds at `confidence`, and n."""
    if o.figure == "error_rate":
        return (*_share(s.failed, s.measured, confidence), s.measured)
    if o.figure == "goodput":
        if s.within_slo is None:
            return None, None, None, 0
        return (*_share(s.within_slo, s.measured, confidence), s.measured)
    if o.figure in ("output_tok_s", "requests_per_s"):
        values = s.output_tok_s if o.figure == "output_tok_s" else s.requests_per_s
        return (sum(values) / len(values) if values else None), None, None, len(values)
    # a mean: the bootstrap is sound for it; each side at `confidence` (a 2c - 1 two-sided interval)
    two_sided = 2 * confidence - 1
    if o.figure == "itl":
        groups = [g for g in s.itl_ms if g]
        return (*statistic_ci(groups, "mean", grouped=True, confidence=two_sided), len(groups))
    values = _per_request(o, s)
    return (*statistic_ci(values, "mean", confidence=two_sided), len(values))


def _share(k: int, n: int, confidence: float) -> tuple[float | None, float | None, float | None]:
    interval = wilson(k, n, NormalDist().inv_cdf(confidence)) if n else None
    if interval is None:
        return None, None, None
    return k / n, interval[0], interval[1]


# --- planning: how many requests decide an objective --------------------------------------------------

MEAN_REQUESTS = 10  # a mean's bootstrap wants a few values; the percentile rule sizes the rest


def look_confidence(confidence: float, looks: int) -> float:
    """The confidence of each of `looks` checks planned in advance, so that looking at the evidence
    that many times keeps the overall error rate at 1 - confidence (Bonferroni: the error rate is
    split evenly between the looks)."""
    return 1.0 - (1.0 - confidence) / max(looks, 1)


def requests_to_decide(objectives: Sequence[Objective], confidence: float) -> int:
    """The fewest requests that could decide every objective: the strictest percentile's count with
    none over the limit (LoadGen's rule), MEAN_REQUESTS for a mean, 1 for a share or a rate."""
    need = 1
    for o in objectives:
        if o.guard or o.kind not in ("time", "speed"):
            continue
        if o.stat == "mean" or o.stat is None:
            need = max(need, MEAN_REQUESTS)
            continue
        q = percentile_of(o.stat)
        need = max(need, requests_needed(q if o.upper else 1 - q, confidence))
    return need


def decided(checks: Sequence[Check]) -> bool:
    """Every check decided (a failed one decides the whole condition on its own)."""
    return any(c.outcome == "failed" for c in checks) or all(c.clear for c in checks)


def still_needed(checks: Sequence[Check]) -> int | None:
    """The most requests an unproven check needs in all (None: none says)."""
    needs = [c.needed for c in checks if c.outcome == "unproven" and c.needed is not None]
    return max(needs) if needs else None


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


def label_of(o: Objective) -> str:
    """'TTFT p99', 'the error rate', 'TTFT within 300 ms' - the figure as a sentence names it."""
    label = LABELS.get(o.figure, o.figure)
    if o.attainment is not None:
        return f"the share of requests with {label} {o.op} {_fmt(o.limit)} {unit_of(o)}".rstrip()
    return f"{label} {o.stat}" if o.stat else label


def unit_of(o: Objective) -> str:
    return {"time": "ms", "speed": "tok/s", "rate": "/s", "share": ""}[o.kind]


def describe_check(c: Check) -> str:
    """'TTFT p99 is 412 ms [395, 431]', 'TTFT p99 is 42.0 ms [41.9, no bound] from 10 requests (299
    needed)' - for verdict sentences. Bounds are one-sided at the check's confidence; an open side
    reads "no bound"."""
    o = c.objective
    label = LABELS.get(o.figure, o.figure)
    if c.value is None:
        return f"{label} is undefined (no request succeeded)"
    if o.attainment is not None:
        limit = f"{_fmt(o.limit)} {unit_of(o)}".rstrip()
        text = f"{_pct(c.value)} of requests have {label} {o.op} {limit}{_bounds(c, _pct)}"
        return text + _evidence(c)
    stat = f" {o.stat}" if o.stat else ""
    if o.kind == "share":
        return f"{label}{stat} is {_pct(c.value)}{_bounds(c, _pct)}"
    value = f"{_fmt(c.value)} {unit_of(o)}".rstrip()
    return f"{label}{stat} is {value}{_bounds(c, _fmt)}" + _evidence(c)


def _pct(v: float | None) -> str:
    return "no bound" if v is None else f"{v * 100:.1f} %"


def _bounds(c: Check, fmt: Callable[[float | None], str]) -> str:
    if c.low is None and c.high is None and c.objective.kind == "rate":
        return ""
    if c.low is None and c.high is None and c.n <= 1:
        return ""
    return f" [{fmt(c.low) if c.low is not None else 'no bound'}, {fmt(c.high) if c.high is not None else 'no bound'}]"


def _evidence(c: Check) -> str:
    """' from 10 requests (299 needed)' when the requests cannot decide the check."""
    if c.outcome != "unproven":
        return ""
    needed = f", at least {c.needed} needed" if c.needed is not None else ""
    return f" from {c.n} requests{needed}"


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def describe_saved_check(c: ConditionCheck) -> str:
    """`describe_check` of a check as saved (`Check.saved()`)."""
    o = parse_objective(c.objective, "expect")
    outcome = c.outcome or ("held" if c.held and c.clear else "failed" if c.held is False and c.clear else "unproven")
    return describe_check(
        Check(
            o,
            c.value,
            c.ci_low,
            c.ci_high,
            c.held,
            outcome if c.value is not None else None,
            c.confidence or CONFIDENCE,
            c.requests or 0,
            c.over,
            c.needed,
        )
    )
