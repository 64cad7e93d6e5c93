"""The SLA search's tables: each step's objectives against their limits, and the boundary found.

Declared once here as a `tokenrace.table` table: the terminal, the HTML report, Markdown and CSV
draw the same rows.
"""

from __future__ import annotations

from tokenrace.model.run import StepRow, SweepFile
from tokenrace.model.sla import SlaPoint
from tokenrace.report.checks import check_cell
from tokenrace.table import Column, Table, fmt, num, text, to_html

TITLE = "SLA search (value [bounds] after pooling the runs at that load; ? undecided)"


def sla_table(s: SweepFile) -> Table:
    """One row per step, one column per objective (value [bounds]); the verdict says whether every
    objective held and whether that was clear, and the last column marks the boundary. The lines
    under it (`sla_lines`) are its notes."""
    if s.sla is None:
        return Table(TITLE, [Column("step", "left"), Column("verdict", "left")])
    sla = s.sla
    kind = sla.search
    columns = [
        Column("step", "left"),
        Column(kind),
        *(Column(o.text) for o in sla.objectives),
        Column("verdict", "left"),
        Column("", "left"),
    ]
    t = Table(TITLE, columns, notes=sla_lines(s))
    best = sla.highest_passing.load(kind) if sla.highest_passing else None
    worst = sla.lowest_failing.load(kind) if sla.lowest_failing else None
    for row in s.steps:
        if row.checks is None:
            continue
        verdict = ("holds" if row.passed else "fails") + ("" if row.certain else " (unclear)")
        at_boundary = row is _last_at(s.steps, best) or row is _last_at(s.steps, worst)
        mark = "highest passing" if at_boundary and row.value == best else "lowest failing" if at_boundary else ""
        t.add(
            text(row.step),
            num(row.value, 0 if kind == "concurrency" else 3),
            *(check_cell(c) for c in row.checks),
            text(verdict, tone="good" if row.passed else "bad"),
            text(f"◀ {mark}" if mark else ""),
            tone="best" if mark else "",
        )
    return t


def _last_at(steps: list[StepRow], value: float | None) -> StepRow | None:
    at = [r for r in steps if value is not None and r.value == value and r.checks is not None]
    return at[-1] if at else None


def sla_lines(s: SweepFile) -> list[str]:
    sla = s.sla
    if not sla:
        return []
    kind = sla.search
    unit = "" if kind == "concurrency" else " req/s"

    def point(p: SlaPoint | None, missing: str) -> str:
        if p is None:
            return missing
        sure = "certain" if p.certain else f"uncertain after {p.runs} runs"
        return f"{fmt(p.load(kind), 0 if kind == 'concurrency' else 3)}{unit} ({sure})"

    objectives = ", ".join(o.text for o in sla.objectives)
    return [
        f"SLA ({objectives}): highest passing {kind} {point(sla.highest_passing, 'none')}; "
        f"lowest failing {point(sla.lowest_failing, 'none reached')}; {sla.reason}"
    ]


def sla_html(s: SweepFile) -> str:
    """The SLA table in the HTML report, with the search's outcome under it."""
    return to_html(sla_table(s), heading=False)
