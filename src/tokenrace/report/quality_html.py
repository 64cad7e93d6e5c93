"""The HTML report's quality sections: one run's accuracy per suite, and two runs' paired comparison."""

from __future__ import annotations

import html
from pathlib import Path

from tokenrace.quality.models import QualityResult
from tokenrace.quality.paired import QualityComparison, difference_line
from tokenrace.report.quality import (
    VERDICT_TONE,
    QualitySection,
    paired_counts_table,
    quality_table,
    sides_table,
    suites_table,
)
from tokenrace.table import HTML_CLASS, pct, to_html


def run_quality_html(result: QualityResult, directory: Path) -> str:
    """Accuracy per suite and overall with Wilson's 95 % interval; failed requests apart."""
    parts = [
        to_html(quality_table(result)),
        f"<p class='note'>{result.overall.accuracy.n} answers checked exactly against {html.escape(result.model)} "
        f"(temperature {result.settings.get('temperature')}, seed {result.settings.get('seed')}); "
        f"items and verdicts in {html.escape(str(directory))}/items.jsonl.</p>",
    ]
    if result.overall.errors:
        kinds = ", ".join(f"{k} {v}" for k, v in result.overall.errors_by_kind.items())
        parts.append(f"<p class='note'>Failed requests, not counted as wrong: {html.escape(kinds)}.</p>")
    if result.interrupted:
        parts.append("<div class='warn'>The quality pass was interrupted: it covers the items answered before.</div>")
    return "".join(parts)


def _paired_html(c: QualityComparison) -> str:
    verdict = HTML_CLASS[VERDICT_TONE.get(c.verdict, "")]
    line = f"<p class='{verdict}'><strong>{html.escape(difference_line(c))}</strong></p>"
    ag = c.agreement
    agree = (
        f"<p class='note'>Agreement of the two sides' answers over {ag.n} pairs: exact match "
        f"{pct(ag.exact_match_rate).text}, token similarity {pct(ag.token_similarity).text}. "
        f"CI of B - A: {html.escape(c.difference.method)}; the verdict is read from it.</p>"
    )
    return to_html(paired_counts_table(c)) + line + to_html(suites_table(c), heading=False) + agree


def comparison_quality_html(q: QualitySection) -> str:
    """A's and B's accuracy side by side, then the paired verdict (or why there is none)."""
    parts = [to_html(sides_table(q))]
    if q.comparison is not None:
        parts.append(_paired_html(q.comparison))
    if q.note:
        parts.append(f"<div class='warn'>{html.escape(q.note)}</div>")
    return "".join(parts)
