"""The HTML report's quality sections: one run's accuracy per suite, and two runs' paired comparison."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from tokenrace.quality.models import Accuracy, QualityResult, Score
from tokenrace.quality.paired import QualityComparison, difference_line
from tokenrace.report.quality import QualitySection, side_rows

VERDICT_CLASS = {"B worse": "worse", "B better": "better"}


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, classes: Sequence[str] = ()) -> str:
    """A table whose first `left` columns are text and the rest numbers."""

    def cls(i: int) -> str:
        return "" if i < left else "num"

    th = "".join(f"<th class='{cls(i)}'>{html.escape(h)}</th>" for i, h in enumerate(head))
    body = []
    for n, row in enumerate(rows):
        tds = "".join(f"<td class='{cls(i)}'>{html.escape(v)}</td>" for i, v in enumerate(row))
        body.append(f"<tr class='{classes[n] if n < len(classes) else ''}'>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def _ci(a: Accuracy) -> str:
    return "–" if a.ci_low is None or a.ci_high is None else f"{a.ci_low * 100:.1f} – {a.ci_high * 100:.1f} %"


def _score_row(name: str, s: Score) -> list[str]:
    return [name, _pct(s.accuracy.value), _ci(s.accuracy), str(s.right), str(s.wrong), str(s.errors)]


def run_quality_html(result: QualityResult, directory: Path) -> str:
    """Accuracy per suite and overall with Wilson's 95 % interval; failed requests apart."""
    rows = [_score_row(name, s) for name, s in result.suites.items()] + [_score_row("overall", result.overall)]
    parts = [
        _table(("suite", "accuracy", "95 % CI (Wilson)", "right", "wrong", "failed"), rows),
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
    p = c.paired
    counts = _table(
        ("both right", "only A right", "only B right", "both wrong", "exact McNemar p"),
        [[str(p.both_right), str(p.only_a), str(p.only_b), str(p.both_wrong), _p(p.p_value)]],
        left=0,
    )
    line = f"<p class='{VERDICT_CLASS.get(c.verdict, '')}'><strong>{html.escape(difference_line(c))}</strong></p>"
    suites = _table(
        ("suite", "n", "only A", "only B", "B - A", "95 % CI", "verdict"),
        [
            [
                name,
                str(s.paired.n),
                str(s.paired.only_a),
                str(s.paired.only_b),
                _pp(s.difference.value),
                f"{_pp(s.difference.ci_low)} .. {_pp(s.difference.ci_high)}",
                s.verdict,
            ]
            for name, s in c.suites.items()
        ],
        classes=[VERDICT_CLASS.get(s.verdict, "") for s in c.suites.values()],
    )
    ag = c.agreement
    agree = (
        f"<p class='note'>Agreement of the two sides' answers over {ag.n} pairs: exact match "
        f"{_pct(ag.exact_match_rate)}, token similarity {_pct(ag.token_similarity)}. "
        f"CI of B - A: {html.escape(c.difference.method)}; the verdict is read from it.</p>"
    )
    return counts + line + suites + agree


def _p(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _pp(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f} pp"


def comparison_quality_html(q: QualitySection) -> str:
    """A's and B's accuracy side by side, then the paired verdict (or why there is none)."""
    parts = [f"<h3>A = {html.escape(q.a.name)}, B = {html.escape(q.b.name)}</h3>"]
    parts.append(_table(("", "A", "B"), [list(r) for r in side_rows(q)]))
    if q.comparison is not None:
        parts.append(_paired_html(q.comparison))
    if q.note:
        parts.append(f"<div class='warn'>{html.escape(q.note)}</div>")
    return "".join(parts)
