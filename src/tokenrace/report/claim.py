"""A claim's tables and its HTML page: the verdict in a plain sentence first, then every condition
against the expectations, then the evidence (the concurrency search, the baseline's run).

Declared once here: the terminal verdict table, the plan table and the HTML section draw the same rows.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from rich.table import Table

from tokenrace.report.html import Page, _run_page, _sweep_page, render
from tokenrace.report.render import fmt
from tokenrace.runs.history import dir_kind
from tokenrace.runs.reader import load_dir
from tokenrace.runs.store import read_json

VERDICT_WORDS = {"holds": "HOLDS", "holds_only_under": "HOLDS ONLY UNDER", "fails": "FAILS", None: "NO VERDICT"}
VERDICT_COLORS = {"holds": "green", "holds_only_under": "yellow", "fails": "red", None: "white"}


def condition_rows(claim: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per condition; one column per expectation (✓/✗ value [CI])."""
    expectations = [e["text"] for e in claim["expectations"]]
    header = ["condition", "value", *expectations, "held", "run / why not"]
    rows = []
    for c in claim["conditions"]:
        by_text = {k["objective"]: k for k in c.get("checks") or []}
        cells = [c["dimension"], _value(c.get("value"))]
        cells += [_check(by_text.get(text)) if c.get("held") is not None else "" for text in expectations]
        cells.append(_held(c))
        where = c.get("skipped") or c.get("run_dir") or ""
        cells.append(f"{where} ({c['note']})" if c.get("note") and not c.get("skipped") else where)
        rows.append(cells)
    return header, rows


def _value(v: Any) -> str:
    return "—" if v is None else str(v)


def _check(k: dict[str, Any] | None) -> str:
    if k is None or k.get("value") is None:
        return "—"
    digits = 3 if k["name"] in ("error_rate", "goodput") else 1
    ci = ""
    if k.get("ci_low") is not None and k.get("ci_high") is not None:
        ci = f" [{fmt(k['ci_low'], digits)}, {fmt(k['ci_high'], digits)}]"
    return f"{'✓' if k['held'] else '✗'} {fmt(k['value'], digits)}{ci}"


def _held(c: dict[str, Any]) -> str:
    if c.get("skipped"):
        return "skipped"
    if c.get("held") is None:
        return "beside" if c["dimension"] == "quality" else "—"
    return "yes" if c["held"] else "no"


def claim_table(claim: dict[str, Any]) -> Table:
    header, rows = condition_rows(claim)
    verdict = claim.get("verdict")
    title = f"[bold {VERDICT_COLORS[verdict]}]{VERDICT_WORDS[verdict]}[/]: {claim.get('model') or '—'} @ {claim.get('endpoint') or '—'}"
    t = Table(title=title, title_justify="left", header_style="bold")
    for h in header:
        t.add_column(h, justify="right" if h not in ("condition", "value", "held", "run / why not") else "left")
    for cells in rows:
        color = {"yes": "green", "no": "red", "skipped": "dim"}.get(cells[-2])
        held = f"[{color}]{cells[-2]}[/]" if color else cells[-2]
        t.add_row(*cells[:-2], held, cells[-1])
    return t


def claim_lines(claim: dict[str, Any]) -> list[str]:
    lines = [claim.get("sentence") or ""]
    limits = claim.get("limits") or {}
    if limits.get("concurrency") is not None or limits.get("prompt_tokens") is not None:
        sure = "" if limits.get("concurrency_certain") in (True, None) else " (uncertain)"
        lines.append(
            f"limits: concurrency {fmt(limits.get('concurrency'))}{sure}, "
            f"prompt tokens {fmt(limits.get('prompt_tokens'))}"
        )
    quality = claim.get("quality")
    if quality:
        acc = quality["overall"]["accuracy"]
        lines.append(
            f"quality (beside, not in the verdict): accuracy {fmt(_pct(acc.get('value')))} % "
            f"[{fmt(_pct(acc.get('ci_low')))}, {fmt(_pct(acc.get('ci_high')))}] over {acc.get('n')} items"
        )
    lines.append(
        f"{claim.get('requests_sent', 0)} requests in {fmt(claim.get('elapsed_s'))} s of a {fmt(claim['budget_s'], 0)} s budget"
        + (" (interrupted: the verdict covers the conditions that finished)" if claim.get("partial") else "")
    )
    return lines


def _pct(v: float | None) -> float | None:
    return None if v is None else v * 100


def plan_table(claim: dict[str, Any]) -> Table:
    """What the battery will send at most, part by part, and what the limits already leave out."""
    t = Table(title="plan (at most)", title_justify="left", header_style="bold")
    priced = any(s.get("usd") is not None for s in claim["plan"])
    for h in ("part", "requests", "seconds", *(("$",) if priced else ())):
        t.add_column(h, justify="left" if h == "part" else "right")
    for s in claim["plan"]:
        part = s["dimension"] + (f" (up to {s['max_concurrency']} in flight)" if s.get("max_concurrency") else "")
        t.add_row(part, str(s["requests"]), fmt(s["seconds"], 0), *((fmt(s.get("usd"), 4),) if priced else ()))
    for c in claim["conditions"]:
        if c.get("skipped"):
            t.add_row(f"[dim]{c['dimension']}: left out ({c['skipped']})[/]", "", "", *(("",) if priced else ()))
    return t


def claim_html(claim: dict[str, Any]) -> str:
    """The claim section: the verdict as a sentence, then the conditions table."""
    verdict = claim.get("verdict")
    header, rows = condition_rows(claim)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        f"<tr class='{ {'yes': 'better', 'no': 'worse'}.get(cells[-2], '') }'>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        + "</tr>"
        for cells in rows
    )
    lines = "".join(f"<p>{html.escape(line)}</p>" for line in claim_lines(claim)[1:])
    expect = ", ".join(e["text"] for e in claim["expectations"])
    return (
        f"<p class='verdict {html.escape(str(verdict))}'><b>{VERDICT_WORDS[verdict]}</b> — "
        f"{html.escape(claim.get('sentence') or '')}</p>"
        f"<p class='note'>Expected: {html.escape(expect)}. Each cell: ✓ or ✗, the figure, its 95 % interval.</p>"
        f"{lines}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def write_claim_report(directory: Path, out: Path) -> Path:
    """report.html for a claim directory: the claim section first, then the concurrency search's page."""

    claim = read_json(directory / "claim.json")
    page = Page(f"claim: {claim.get('model') or '—'} @ {claim.get('endpoint') or '—'}", directory.name)
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
