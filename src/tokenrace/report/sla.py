"""The SLA search's tables: each step's objectives against their limits, and the boundary found.

Declared once here; the terminal (rich), Markdown and the HTML report draw the same rows.
"""

from __future__ import annotations

import html

from rich.table import Table

from tokenrace.model.claim import ConditionCheck
from tokenrace.model.run import StepRow, SweepFile
from tokenrace.model.sla import SlaPoint
from tokenrace.report.checks import check_cell
from tokenrace.report.render import fmt


def sla_rows(s: SweepFile) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, marks): one row per step, one column per objective (value [bounds]); each
    row's mark says whether every objective held, whether that was clear, and where the boundary is."""
    if s.sla is None:
        return ["step", "verdict"], [], []
    sla = s.sla
    kind = sla.search
    header = ["step", kind, *(o.text for o in sla.objectives), "verdict"]
    best = sla.highest_passing.load(kind) if sla.highest_passing else None
    worst = sla.lowest_failing.load(kind) if sla.lowest_failing else None
    rows, marks = [], []
    for row in s.steps:
        if row.checks is None:
            continue
        cells = [row.step, fmt(row.value, 0 if kind == "concurrency" else 3)]
        cells += [_check_cell(c) for c in row.checks]
        verdict = ("holds" if row.passed else "fails") + ("" if row.certain else " (unclear)")
        cells.append(verdict)
        rows.append(cells)
        at_boundary = row is _last_at(s.steps, best) or row is _last_at(s.steps, worst)
        marks.append(
            "highest passing" if at_boundary and row.value == best else "lowest failing" if at_boundary else ""
        )
    return header, rows, marks


def _last_at(steps: list[StepRow], value: float | None) -> StepRow | None:
    at = [r for r in steps if value is not None and r.value == value and r.checks is not None]
    return at[-1] if at else None


def _check_cell(c: ConditionCheck) -> str:
    return "—" if c.value is None else check_cell(c).text


def sla_table(s: SweepFile) -> Table:
    header, rows, marks = sla_rows(s)
    t = Table(
        title="SLA search (value [bounds] after pooling the runs at that load; ? undecided)", title_justify="left"
    )
    for c in (*header, ""):
        t.add_column(c, justify="left" if c in ("step", "verdict", "") else "right")
    for cells, mark in zip(rows, marks, strict=True):
        color = "green" if cells[-1].startswith("holds") else "red"
        t.add_row(*cells[:-1], f"[{color}]{cells[-1]}[/]", f"[bold]◀ {mark}[/]" if mark else "")
    return t


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
    """The SLA table as HTML: the objectives' limits in the header, the boundary rows marked."""
    header, rows, marks = sla_rows(s)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in (*header, ""))
    body = []
    for cells, mark in zip(rows, marks, strict=True):
        cls = "ok" if cells[-1].startswith("holds") else "bad"
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        body.append(f'<tr class="{cls}{" boundary" if mark else ""}">{tds}<td><b>{html.escape(mark)}</b></td></tr>')
    lines = "".join(f"<p>{html.escape(line)}</p>" for line in sla_lines(s))
    return f'{lines}<table class="sla"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
