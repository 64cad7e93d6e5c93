"""`tokenrace doctor`: check the NVIDIA/CUDA stack, or explain an error message."""

from __future__ import annotations

import os
import sys
import time

import click
import orjson
from rich.console import Console

from tokenrace.doctor import knowledge
from tokenrace.doctor.probe import Probe, RecordedProbe, RecordingProbe, SystemProbe
from tokenrace.doctor.render import render_explain, render_report
from tokenrace.doctor.runner import run_doctor

FIXTURES_ENV = "TOKENRACE_DOCTOR_FIXTURES"


@click.command(name="doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--model", metavar="NAME|PATH", help="Also check disk, RAM and GPU memory against this model's weights.")
@click.option("--explain", metavar="TEXT", help="Look up an error message or code: its cause, what to check, the fix.")
@click.option(
    "--fixtures",
    type=click.Path(file_okay=False),
    envvar=FIXTURES_ENV,
    metavar="DIR",
    help="Answer from a recorded scenario folder (one --record wrote) instead of this machine.",
)
@click.option(
    "--record",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also write every command's output and every file read to DIR, a scenario that --fixtures replays "
    "(attach it to a bug report; environment variables named like keys or tokens are left out).",
)
def command(as_json: bool, model: str | None, explain: str | None, fixtures: str | None, record: str | None) -> None:
    """Check the GPU driver stack and say what is wrong and how to fix it.

    Exit code 0 when every check is ok, 1 when some warn, 2 when some fail.
    With --explain, look up an error message instead (works on any OS).
    """
    if explain is not None:
        _exit(_explain(explain, as_json))

    probe: Probe = RecordedProbe(fixtures) if fixtures else SystemProbe()
    if record:
        probe = RecordingProbe(
            probe, record, description=f"recorded by tokenrace doctor --record, {time.strftime('%Y-%m-%d')}"
        )
    report = run_doctor(probe, model=model)
    if as_json:
        click.echo(orjson.dumps(report.to_json_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        render_report(report, _console())
    _exit(report.exit_code)


def _exit(code: int) -> None:
    # SystemExit, not ctx.exit(): tokenrace.cli.main runs click with standalone_mode=False, where
    # click turns ctx.exit(code) into a return value that main() does not pass on.
    sys.exit(code)


def _explain(text: str, as_json: bool) -> int:
    matches = knowledge.explain(text)
    if as_json:
        rows = [{**m.entry.model_dump(), "score": m.score, "matched": m.matched, "exact": m.exact} for m in matches]
        click.echo(orjson.dumps({"query": text, "matches": rows}, option=orjson.OPT_INDENT_2).decode())
    else:
        render_explain(text, matches, _console())
    return 0 if matches else 1


def _console() -> Console:
    if sys.stdout.isatty():
        return Console(highlight=False)
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() else 100, highlight=False)
