"""Goodput's SLOs (`--slo ttft<=500ms,tpot<=50ms`): objectives judged on each request alone.

`--slo` speaks the objectives' grammar (`figures.objectives.parse_objective`, as `--sla` and
`--expect` do), limited to what one request has a value for: a ceiling on its TTFT, TPOT or E2E,
or on its largest chunk gap (`itl`). A request is *within the SLOs* when it succeeded and meets
every one (docs/metrics.md, "goodput"). The older spelling `ttft=500ms` still reads as
`ttft<=500ms`. Files keep the limits as they always have: `{"ttft_ms": 500.0}`.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tokenrace.errors import InvalidInput
from tokenrace.figures.objectives import Objective, parse_objective

# The figures one request has a value for, in ms.
PER_REQUEST_SLOS = ("ttft", "tpot", "e2e", "itl")
_NAME = re.compile(r"^\s*([a-z][a-z0-9_]*)")
_OLD = re.compile(r"^([a-z][a-z0-9_]*\s*)=(?![<>])")  # `ttft=500ms`, not `ttft=<500ms`
_CEILING = re.compile(r"^[a-z][a-z0-9_]*\s*(<=|=<)\s*[-+0-9.]")

Slo = tuple[Objective, ...]


def parse_slo(text: str | None) -> Slo | None:
    """`ttft<=500ms,tpot<=50ms,e2e<=10s` (or `ttft=500ms,...`) -> per-request objectives."""
    if not text:
        return None
    objectives = tuple(_item(part) for part in text.split(",") if part.strip())
    if not objectives:
        raise InvalidInput("slo", "give at least one SLO, e.g. ttft<=500ms")
    names = [o.figure for o in objectives]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidInput("slo", f"{twice[0]} has more than one limit")
    return objectives


def _item(part: str) -> Objective:
    written = part.strip()
    item = _OLD.sub(r"\1<=", written.lower(), count=1)
    name = _NAME.match(item)
    figure = name.group(1) if name else ""
    if figure not in PER_REQUEST_SLOS:
        raise InvalidInput("slo", f"{written!r}: an SLO is a ceiling on one request's ttft, tpot, e2e or itl")
    if not _CEILING.match(item):
        raise InvalidInput("slo", f"{written!r}: an SLO is a ceiling, written {figure}<=LIMIT (e.g. {figure}<=500ms)")
    objective = parse_objective(item, "slo")  # the number and its unit
    return replace(objective, stat=None)  # judged on each request, not on a statistic of them


def slo_limits(slo: Slo) -> dict[str, float]:
    """The limits as files keep them: `{"ttft_ms": 500.0}`."""
    return {f"{o.figure}_ms": o.limit for o in slo}
