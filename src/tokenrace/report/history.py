"""The run history's table (`tokenrace runs`), declared once for the terminal, Markdown and CSV.

Apart from report/tables.py because a claim's row shows its verdict in report/claim.py's words, and
report/claim.py builds on the HTML report, which builds on report/tables.py.
"""

from __future__ import annotations

from tokenrace.model.history import HistoryRow
from tokenrace.model.metrics import ERROR_RATE, THROUGHPUT, TTFT
from tokenrace.model.run import Knee
from tokenrace.report.claim import VERDICT_WORDS
from tokenrace.report.headline import knee_text, shown
from tokenrace.table import Column, Table, fmt, text

COLUMNS = (
    *(Column(c, "left") for c in ("id", "kind", "started (UTC)", "name", "model", "endpoint", "load")),
    *(Column(c) for c in (ERROR_RATE.display.header, TTFT.label("p50"), THROUGHPUT.display.header)),
    Column("knee", "left"),
)
VERDICT = Column("verdict", "left")  # only when the rows hold a claim


def runs_table(rows: list[HistoryRow]) -> Table:
    """One row per indexed run, sweep, profile or claim, steps indented under their sweep."""
    claims = any(r.kind == "claim" for r in rows)
    t = Table(None, [*COLUMNS, *((VERDICT,) if claims else ())])
    for r in rows:
        t.add(
            text(r.id),
            text(r.kind if not r.parent_id else f"  {r.kind}"),
            text((r.started_at or "")[:16].replace("T", " ")),
            text(r.label or r.name),
            text(r.model),
            text(r.endpoint),
            text(_load(r)),
            shown(ERROR_RATE, r.error_rate, bare=True),
            shown(TTFT, r.ttft_p50_ms, bare=True),
            shown(THROUGHPUT, r.output_tokens_per_s, bare=True),
            text(_knee(r.knee)),
            *((text(_verdict(r)),) if claims else ()),
        )
    return t


def _load(r: HistoryRow) -> str | None:
    if r.kind == "claim":
        return f"{r.steps} conditions"
    if r.kind != "run":
        return f"{r.steps} steps"
    if r.rate is not None:
        return f"{fmt(r.rate, 2)} req/s"
    return f"c={int(r.concurrency)}" if r.concurrency is not None else None


def _knee(saved: str | None) -> str:
    """The index keeps a sweep's knee as its JSON text."""
    if not saved:
        return ""
    return knee_text(Knee.model_validate_json(saved))


def _verdict(r: HistoryRow) -> str:
    if r.kind != "claim":
        return ""
    return next((words for verdict, words in VERDICT_WORDS.items() if verdict == r.verdict), VERDICT_WORDS[None])
