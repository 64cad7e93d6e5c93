"""Doctor's output for people: the checks as a declared table (`checks_table`, drawn by any of
tokenrace.table's renderers), then cause, fix and evidence for what is not ok."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from tokenrace.doctor.knowledge import Match
from tokenrace.doctor.result import CheckResult, DoctorReport, Status
from tokenrace.table import Column, Table, Tone, text, to_rich

STYLE = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}
LABEL = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip"}
TONE: dict[Status, Tone] = {Status.OK: "good", Status.WARN: "warn", Status.FAIL: "bad", Status.SKIP: "muted"}


def render_report(report: DoctorReport, console: Console) -> None:
    console.print(Panel(Text(report.headline), title="tokenrace doctor", border_style=_border(report.exit_code)))
    console.print(to_rich(checks_table(report)))
    for check in report.checks:
        if check.status in (Status.WARN, Status.FAIL):
            console.print(_problem(check))
    counts = report.counts()
    tally = ", ".join(f"{counts[s.value]} {s.value}" for s in Status if counts[s.value])
    console.print(f"{tally}. Exit code {report.exit_code} (0 all ok, 1 warnings, 2 failures).", highlight=False)


def checks_table(report: DoctorReport) -> Table:
    """One line per check: its status, its id and what it found (every renderer draws the same rows)."""
    table = Table(None, [Column("", "left"), Column("check", "left"), Column("finding", "left")])
    for check in report.checks:
        table.add(text(LABEL[check.status], tone=TONE[check.status]), text(check.id), text(check.summary))
    return table


def _problem(check: CheckResult) -> Panel:
    parts: list[Text] = [Text(check.summary, style="bold")]
    if check.cause:
        parts.append(Text.assemble(("Cause: ", "bold"), check.cause))
    if check.fix:
        parts.append(Text.assemble(("Fix:   ", "bold"), check.fix))
    for item in check.evidence:
        code = "" if item.returncode in (None, 0) else f"  (exit {item.returncode})"
        parts.append(Text.assemble((f"$ {item.cmd}{code}", "cyan"), "\n", _indent(item.excerpt)))
    source = f" · from the knowledge base: {check.kb}" if check.kb else ""
    title = f"{LABEL[check.status]} {check.id}{source}"
    return Panel(Group(*parts), title=escape(title), title_align="left", border_style=STYLE[check.status])


def render_explain(text: str, matches: list[Match], console: Console) -> None:
    if not matches:
        console.print(
            f"No known cause for {text!r}. Run `tokenrace doctor` to check this machine.", markup=False, highlight=False
        )
        return
    for rank, match in enumerate(matches, 1):
        item = match.entry
        how = f"matched {match.matched!r}" if match.exact else f"shares words: {match.matched}"
        body = Group(
            Text.assemble(("Cause: ", "bold"), item.cause),
            Text.assemble(("Check: ", "bold"), item.check),
            Text.assemble(("Fix:   ", "bold"), item.fix),
            Text(f"{how} · source: {item.source} · id: {item.id}", style="dim"),
        )
        console.print(Panel(body, title=escape(f"{rank}. {item.title}"), title_align="left", border_style="cyan"))


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _border(exit_code: int) -> str:
    return {0: "green", 1: "yellow"}.get(exit_code, "red")
