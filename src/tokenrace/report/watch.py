"""`tokenrace watch --report`: a watch's runs over time, the rolling P50 over 72 hours (Artificial
Analysis' headline), and the published figure the user states beside it: one table (terminal and
HTML) and one plot over time (HTML)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from tokenrace.errors import InvalidInput
from tokenrace.model.history import WatchSlot
from tokenrace.model.metrics import AA_E2E_100, AA_OUTPUT_SPEED, AA_TTFT, SectionFigure
from tokenrace.report.headline import shown
from tokenrace.report.html import Page, plotly, render
from tokenrace.report.reference import named
from tokenrace.table import Column, Table, num, pct, text, to_html

WINDOW_H = 72.0  # Artificial Analysis: the median over the past 72 hours
Figure = Literal["output_speed", "ttft", "e2e_100"]
# figure -> (WatchPoint field, the reference figure whose P50 it is: label, unit and digits, model/metrics.py)
FIGURES: dict[Figure, tuple[str, SectionFigure]] = {
    "output_speed": ("output_speed_tok_s", AA_OUTPUT_SPEED),
    "ttft": ("ttft_s", AA_TTFT),
    "e2e_100": ("e2e_100_tokens_s", AA_E2E_100),
}

_PUBLISHED = re.compile(r"^\s*([0-9][0-9,]*\.?[0-9]*)\s*(tok/s|tokens/s|s|ms)\s*(?:,\s*(.*))?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Published:
    """A figure someone published, as the user states it: '1705 tok/s, Artificial Analysis, P50 72 h'."""

    value: float  # in the figure's unit (tok/s, or s)
    figure: Figure
    source: str  # the rest of the statement: who published it, and how it was made

    @property
    def label(self) -> str:
        unit = FIGURES[self.figure][1].display.unit
        return f"{self.value:,.4g} {unit}" + (f" ({self.source})" if self.source else "")


def parse_published(statement: str, figure: Figure | None = None) -> Published:
    """'1705 tok/s, Artificial Analysis, P50 72 h' -> Published(1705, output_speed, 'Artificial
    Analysis, P50 72 h'). A time in s or ms is TTFT unless `figure` says e2e_100."""
    m = _PUBLISHED.match(statement)
    if m is None:
        raise InvalidInput(
            "published",
            f"expected 'VALUE UNIT, SOURCE' (e.g. '1705 tok/s, Artificial Analysis, P50 72 h'), got {statement!r}",
        )
    value = float(m.group(1).replace(",", ""))
    unit = m.group(2).lower()
    speed = unit in ("tok/s", "tokens/s")
    chosen: Figure = figure or ("output_speed" if speed else "ttft")
    if speed != (chosen == "output_speed"):
        raise InvalidInput("published", f"{unit} does not fit {chosen} (output speed is in tok/s, times in s or ms)")
    return Published(value / 1000 if unit == "ms" else value, chosen, (m.group(3) or "").strip())


def _values(slots: Sequence[WatchSlot], figure: Figure) -> list[tuple[datetime, float]]:
    field = FIGURES[figure][0]
    out = []
    for s in slots:
        v = getattr(s.figures, field) if s.figures is not None and s.status == "done" else None
        if v is not None:
            out.append((datetime.fromisoformat(s.finished_at or s.due_at), float(v)))
    return sorted(out)


@dataclass(frozen=True, slots=True)
class Rolling:
    """The median of the runs in the window ending at `at` (each run one measurement, its own P50)."""

    at: datetime
    p50: float | None
    runs: int
    span_h: float | None  # first to last run inside the window


def rolling_p50(points: Sequence[tuple[datetime, float]], at: datetime, window_h: float = WINDOW_H) -> Rolling:
    inside = [(t, v) for t, v in points if at - timedelta(hours=window_h) < t <= at]
    if not inside:
        return Rolling(at, None, 0, None)
    span = (inside[-1][0] - inside[0][0]).total_seconds() / 3600
    return Rolling(at, round(statistics.median(v for _, v in inside), 4), len(inside), round(span, 2))


def watch_table(name: str, slots: Sequence[WatchSlot], now: datetime, published: Published | None) -> Table:
    """Each figure's rolling P50 over the last 72 hours, beside the published figure when stated."""
    done = sum(1 for s in slots if s.status == "done")
    t = Table(
        f"watch {name}: rolling P50 over {WINDOW_H:g} h",
        [
            Column("figure", "left"),
            Column("P50 72 h"),
            Column("runs"),
            Column("over h"),
            Column("published"),
            Column("measured ÷ published"),
        ],
    )
    for figure, (_, declared) in FIGURES.items():
        r = rolling_p50(_values(slots, figure), now)
        if r.runs == 0 and (published is None or published.figure != figure):
            continue
        mine = published if published is not None and published.figure == figure else None
        ratio = r.p50 / mine.value if mine is not None and r.p50 is not None and mine.value else None
        t.add(
            text(named(declared)),
            shown(declared, r.p50, bare=True),
            num(r.runs, 0),
            num(r.span_h),
            text(mine.label if mine else None),
            pct(ratio),
        )
    counts = {k: sum(1 for s in slots if s.status == k) for k in ("done", "failed", "missed", "skipped")}
    spent = sum(s.usd or 0.0 for s in slots)
    t.notes.append(
        f"{done} runs done, {counts['failed']} failed, {counts['missed']} missed, {counts['skipped']} skipped; "
        f"${spent:.4f} spent"
    )
    if published is not None:
        r = rolling_p50(_values(slots, published.figure), now)
        t.notes.append(f"{r.runs} runs over {num(r.span_h).text} h vs {published.label}")
    return t


def slots_table(slots: Sequence[WatchSlot]) -> Table:
    """The schedule's slots that came due: when, what happened, the run and its figures."""
    t = Table(
        "runs",
        [Column("due (UTC)", "left"), Column("status", "left"), Column(AA_OUTPUT_SPEED.display.header),
         Column(AA_TTFT.display.header), Column("$"), Column("run", "left"), Column("note", "left")],
    )  # fmt: skip
    for s in slots:
        if s.status == "planned":
            continue
        f = s.figures
        t.add(
            text(s.due_at),
            text(s.status),
            shown(AA_OUTPUT_SPEED, f.output_speed_tok_s if f else None, bare=True),
            shown(AA_TTFT, f.ttft_s if f else None, bare=True),
            num(s.usd, 4),
            text(s.run_path),
            text(s.note),
        )
    return t


def watch_figure(slots: Sequence[WatchSlot], figure: Figure, published: Published | None) -> object:
    """Each run's figure over time, the rolling P50 over 72 hours, and the published figure."""
    go = plotly()
    declared = FIGURES[figure][1]
    points = _values(slots, figure)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[t for t, _ in points],
            y=[v for _, v in points],
            mode="markers",
            name="each run (its P50)",
            marker={"color": "#2563eb", "size": 7},
        )  # fmt: skip
    )
    rolling = [rolling_p50(points, t) for t, _ in points]
    fig.add_trace(
        go.Scatter(
            x=[r.at for r in rolling],
            y=[r.p50 for r in rolling],
            mode="lines",
            name=f"rolling P50, {WINDOW_H:g} h",
            line={"color": "#f97316", "width": 3},
        )  # fmt: skip
    )
    if published is not None and published.figure == figure:
        fig.add_hline(
            y=published.value,
            line={"dash": "dash", "color": "#dc2626"},
            annotation_text=f"published: {published.label}",
        )
    fig.update_xaxes(title_text="time (UTC)")
    fig.update_yaxes(title_text=named(declared), rangemode="tozero")
    return fig


def watch_html(name: str, slots: Sequence[WatchSlot], now: datetime, published: Published | None) -> str:
    page = Page(f"watch {name}", f"{len(slots)} slots · rendered at {now.isoformat(timespec='minutes')}")
    page.add("Rolling P50", to_html(watch_table(name, slots, now, published), heading=False))
    figures: list[Figure] = [f for f in FIGURES if _values(slots, f)]
    if published is not None and published.figure not in figures:
        figures.insert(0, published.figure)
    for figure in figures:
        page.add(
            f"{FIGURES[figure][1].display.label} over time",
            page.chart(
                watch_figure(slots, figure, published),
                "Dots: each run; line: the median of the runs in the 72 hours before it.",
            ),
        )
    page.add("Runs", to_html(slots_table(slots), heading=False))
    return render(page)
