"""A table, declared once, rendered for the terminal (rich), HTML, Markdown and CSV.

A declaration (report/tables.py, report/compare.py, report/quality.py, report/sla.py, and in the
leaves plan/tables.py and doctor/render.py) builds a `Table` from the
typed models: its columns, and one `Row` of `Cell`s per line. A cell keeps its value and how to show
it; the renderers only lay it out, so the terminal, the HTML page and a Markdown or CSV export show
the same rows with the same numbers. Missing values are "—" for a reader and empty in CSV.
"""

from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass, field
from typing import Any, Literal

from rich.table import Table as RichTable
from rich.text import Text

MISSING = "—"  # a missing value, as a reader sees it (never "None", never 0)

Align = Literal["left", "right"]
# A tone says what a cell or row means; each renderer shows it its own way (colour, CSS class).
Tone = Literal["", "good", "bad", "warn", "best", "muted"]
RICH_STYLE = {"": "", "good": "green", "bad": "red", "warn": "yellow", "best": "bold green", "muted": "dim"}
HTML_CLASS = {"": "", "good": "better", "bad": "worse", "warn": "warn-row", "best": "knee", "muted": "muted"}


@dataclass(frozen=True, slots=True)
class Column:
    label: str
    align: Align = "right"


@dataclass(frozen=True, slots=True)
class Cell:
    """One value and how a reader sees it: `value * scale` with `digits` decimals (thousands
    separated), between `prefix` and `suffix`, signed when `sign`. Text and ints are shown as they are."""

    value: float | int | str | None
    digits: int = 1
    scale: float = 1.0
    prefix: str = ""
    suffix: str = ""
    sign: bool = False
    tone: Tone = ""

    @property
    def text(self) -> str:
        v = self.value
        if v is None:
            return MISSING
        if isinstance(v, str):
            return v
        if isinstance(v, int) and self.scale == 1 and not self.sign:
            return f"{self.prefix}{v:,}{self.suffix}"
        sign = "+" if self.sign else ""
        return f"{self.prefix}{v * self.scale:{sign},.{self.digits}f}{self.suffix}"

    @property
    def csv(self) -> str:
        """The value in the column's unit, unrounded beyond 6 decimals; empty when missing."""
        v = self.value
        if v is None:
            return ""
        if isinstance(v, str):
            return v
        if isinstance(v, int) and self.scale == 1:
            return str(v)
        return repr(round(v * self.scale, 6))


def num(value: float | int | None, digits: int = 1, tone: Tone = "") -> Cell:
    return Cell(value, digits, tone=tone)


def pct(fraction: float | None, digits: int = 1, suffix: str = " %", sign: bool = False) -> Cell:
    """A fraction shown in per cent ("42.0 %")."""
    return Cell(fraction, digits, scale=100.0, suffix=suffix, sign=sign)


def text(value: str | None, tone: Tone = "") -> Cell:
    return Cell(value, tone=tone)


BLANK = Cell("")


@dataclass(slots=True)
class Row:
    cells: list[Cell]
    tone: Tone = ""


@dataclass(slots=True)
class Table:
    title: str | None
    columns: list[Column]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: Cell, tone: Tone = "") -> None:
        self.rows.append(Row(list(cells), tone))

    def labels(self) -> list[str]:
        """The first cell of every row: what the table lists."""
        return [r.cells[0].text for r in self.rows]


# --- renderers -----------------------------------------------------------------------------------


def to_rich(table: Table, compact: bool = False) -> RichTable:
    """`compact`: no borders and no wrapping, for a wide table read line by line (the planner's)."""
    if compact:
        t = RichTable(title=table.title, title_justify="left", header_style="bold", box=None, pad_edge=False)
    else:
        t = RichTable(title=table.title, title_justify="left", header_style="bold")
    for c in table.columns:
        t.add_column(c.label, justify=c.align, no_wrap=compact)
    for row in table.rows:
        cells = [Text(c.text, style=RICH_STYLE[c.tone]) for c in row.cells]
        t.add_row(*cells, style=RICH_STYLE[row.tone] or None)
    return t


def to_html(table: Table, heading: bool = True) -> str:
    def cls(i: int) -> str:
        return "num" if table.columns[i].align == "right" else ""

    head = "".join(f"<th class='{cls(i)}'>{html.escape(c.label)}</th>" for i, c in enumerate(table.columns))
    body = []
    for row in table.rows:
        tds = "".join(
            f"<td class='{' '.join(filter(None, (cls(i), HTML_CLASS[c.tone])))}'>{html.escape(c.text)}</td>"
            for i, c in enumerate(row.cells)
        )
        body.append(f"<tr class='{HTML_CLASS[row.tone]}'>{tds}</tr>")
    title = f"<h3>{html.escape(table.title)}</h3>" if heading and table.title else ""
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in table.notes)
    return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{notes}"


def to_markdown(table: Table, heading: bool = True) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"### {table.title}", ""] if heading and table.title else []
    out.append(line([c.label for c in table.columns]))
    out.append("|" + "".join("---:|" if c.align == "right" else "---|" for c in table.columns))
    out += [line([c.text for c in row.cells]) for row in table.rows]
    out += ["", *table.notes] if table.notes else []
    return "\n".join(out) + "\n"


def to_csv(table: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([c.label for c in table.columns])
    for row in table.rows:
        w.writerow([c.csv for c in row.cells])
    return buf.getvalue()


def fmt(v: Any, digits: int = 1) -> str:
    """A value in a line of text, by the tables' rule: "—" when missing, thousands separated."""
    return Cell(v, digits).text if v is None or isinstance(v, (int, float, str)) else str(v)
