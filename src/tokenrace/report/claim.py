"""A claim's tables and its HTML page: the verdict in a plain sentence first, then every condition
against the expectations, then the evidence (the concurrency search, the baseline's run).

Declared once here as `tokenrace.table` tables (`claim_table`, `plan_table`): the terminal, the HTML
section, `show --markdown` and `show --csv` draw the same rows.
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.console import Group

from tokenrace.claim.models import ClaimFile, Condition, Verdict, read_claim
from tokenrace.report.checks import check_cell
from tokenrace.report.html import Page, _run_page, _sweep_page, render
from tokenrace.report.tables import lines_view
from tokenrace.runs.history import dir_kind
from tokenrace.runs.reader import load_dir
from tokenrace.table import BLANK, Cell, Column, Table, Tone, fmt, text, to_html, to_markdown, to_rich

VERDICT_WORDS: dict[Verdict | None, str] = {
    "holds": "HOLDS",
    "holds_only_under": "HOLDS ONLY UNDER",
    "fails": "FAILS",
    "unproven": "UNPROVEN",
    None: "NO VERDICT",
}
VERDICT_COLORS: dict[Verdict | None, str] = {
    "holds": "green",
    "holds_only_under": "yellow",
    "fails": "red",
    "unproven": "magenta",
    None: "white",
}
HELD_TONE: dict[str, Tone] = {"held": "good", "failed": "bad", "unproven": "warn", "yes": "good", "no": "bad"}


def claim_title(claim: ClaimFile) -> str:
    return f"{VERDICT_WORDS[claim.verdict]}: {claim.model or '—'} @ {claim.endpoint or '—'}"


def claim_table(claim: ClaimFile) -> Table:
    """One row per condition; one column per expectation (✓/✗/?, the figure, its bounds: "no bound"
    where the requests cannot bound that side), and what the evidence shows (held, failed, unproven)."""
    expectations = [e.text for e in claim.expectations]
    t = Table(
        claim_title(claim),
        [
            Column("condition", "left"),
            Column("value", "left"),
            *(Column(e) for e in expectations),
            Column("outcome", "left"),
            Column("run / why not", "left"),
        ],
    )
    for c in claim.conditions:
        by_text = {k.objective: k for k in c.checks}
        checks = [check_cell(by_text.get(e)) if c.held is not None else BLANK for e in expectations]
        held = _held(c)
        where = c.skipped or c.run_dir or ""
        t.add(
            text(c.dimension),
            text(None if c.value is None else str(c.value)),
            *checks,
            text(held, tone=HELD_TONE.get(held, "")),
            text((f"{where} ({c.note})" if where else c.note) if c.note and not c.skipped else where),
        )
    return t


def _held(c: Condition) -> str:
    if c.skipped:
        return "skipped"
    if c.held is None:
        return "beside" if c.dimension == "quality" else "—"
    if c.outcome is not None:
        return c.outcome
    return "yes" if c.held else "no"


def claim_lines(claim: ClaimFile) -> list[str]:
    lines = [claim.sentence or ""]
    limits = claim.limits
    if limits.concurrency is not None or limits.prompt_tokens is not None:
        sure = "" if limits.concurrency_certain in (True, None) else " (uncertain)"
        lines.append(f"limits: concurrency {fmt(limits.concurrency)}{sure}, prompt tokens {fmt(limits.prompt_tokens)}")
    if claim.quality is not None:
        acc = claim.quality.overall.accuracy
        lines.append(
            f"quality (beside, not in the verdict): accuracy {fmt(_pct(acc.value))} % "
            f"[{fmt(_pct(acc.ci_low))}, {fmt(_pct(acc.ci_high))}] over {acc.n} items"
        )
    lines.append(
        f"{claim.requests_sent} requests in {fmt(claim.elapsed_s)} s of a {fmt(claim.budget_s, 0)} s budget"
        + (" (interrupted: the verdict covers the conditions that finished)" if claim.partial else "")
    )
    return lines


def _pct(v: float | None) -> float | None:
    return None if v is None else v * 100


def plan_table(claim: ClaimFile) -> Table:
    """What the battery will send at most, part by part, and what the limits already leave out."""
    priced = any(s.usd is not None for s in claim.plan)
    columns = [
        Column("part", "left"),
        Column("requests"),
        Column("to decide one"),
        Column("seconds"),
        *((Column("$"),) if priced else ()),
    ]
    t = Table("plan (at most)", columns)
    for s in claim.plan:
        part = s.dimension + (f" (up to {s.max_concurrency} in flight)" if s.max_concurrency else "")
        t.add(text(part), Cell(s.requests), Cell(s.needed), Cell(s.seconds, 0), *((Cell(s.usd, 4),) if priced else ()))
    for c in claim.conditions:
        if c.skipped:
            t.add(text(f"{c.dimension}: left out ({c.skipped})"), BLANK, BLANK, BLANK, *((BLANK,) if priced else ()))
    return t


def claim_view(claim: ClaimFile) -> Group:
    """The conditions table, titled with the verdict in its colour, then the sentence and the limits."""
    table = to_rich(claim_table(claim))
    table.title_style = f"bold {VERDICT_COLORS[claim.verdict]}"
    return Group(table, *lines_view(claim_lines(claim)))


def claim_markdown(claim: ClaimFile) -> str:
    """`show CLAIM --markdown`: the conditions table (titled with the verdict), then the sentence and the limits."""
    return to_markdown(claim_table(claim)) + "\n" + "\n\n".join(line for line in claim_lines(claim) if line) + "\n"


def claim_html(claim: ClaimFile) -> str:
    """The claim section: the verdict as a sentence, then the conditions table."""
    lines = "".join(f"<p>{html.escape(line)}</p>" for line in claim_lines(claim)[1:])
    expect = ", ".join(e.text for e in claim.expectations)
    return (
        f"<p class='verdict {html.escape(str(claim.verdict))}'><b>{VERDICT_WORDS[claim.verdict]}</b> — "
        f"{html.escape(claim.sentence or '')}</p>"
        f"<p class='note'>Expected: {html.escape(expect)}. Each cell: ✓ or ✗, the figure, its 95 % interval.</p>"
        f"{lines}{to_html(claim_table(claim), heading=False)}"
    )


def write_claim_report(directory: Path, out: Path) -> Path:
    """report.html for a claim directory: the claim section first, then the concurrency search's page."""

    claim = read_claim(directory)
    page = Page(f"claim: {claim.model or '—'} @ {claim.endpoint or '—'}", directory.name)
    page.add("The claim", claim_html(claim))
    evidence = None
    if dir_kind(directory / "concurrency") == "sweep":
        evidence = _sweep_page(load_dir(directory / "concurrency"), None, None)
    elif dir_kind(directory / "warm") == "run":
        evidence = _run_page(load_dir(directory / "warm"), None, None)
    if evidence is not None:
        page.sections.extend(evidence.sections)
    text = render(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
