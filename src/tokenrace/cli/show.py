"""`tokenrace show RUN`: reprint a run's or a sweep's report from its saved files (never re-measures)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from tokenrace.cli.common import echo_json
from tokenrace.cli.options import cost_options, spec_from_options
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.report.render import fmt, to_csv, to_markdown, to_rich
from tokenrace.report.tables import (
    manifest_table,
    print_profile,
    print_summary,
    print_sweep,
    run_table,
    wide_console,
    with_costs,
)
from tokenrace.runs.reader import load
from tokenrace.runs.run import Run


@click.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the saved summary (or sweep.json) as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the table (summary, sweep or steps) as Markdown.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the table (summary, sweep or steps) as CSV.")
@cost_options
def command(run: str, as_json: bool, as_markdown: bool, as_csv: bool, **o: Any) -> None:
    """Reprint the report of RUN: a run, sweep or profile directory, an id or name from `tokenrace runs`,
    or a vLLM `bench serve` result JSON / AIPerf profile_export.jsonl."""
    data = load(run)
    cost = spec_from_options(o)
    if as_json:
        echo_json(data.data.model_dump(mode="json"))
    elif as_markdown or as_csv:
        table = run_table(data, cost)
        click.echo(to_markdown(table) if as_markdown else to_csv(table), nl=False)
    else:
        show(data, wide_console(), cost)


def show(data: Run, console: Console, cost: CostSpec | None = None) -> None:
    if isinstance(data.data, SweepFile):
        priced = with_costs(data, cost)
        assert isinstance(priced, SweepFile)
        print_sweep(priced, console)
    elif isinstance(data.data, ProfileFile):
        print_profile(data.data, console)
    else:
        m = data.manifest
        found = cost_of(data.summary, m.provider, m.model, cost)
        print_summary(data.summary, console, title=f"{fmt(m.model)} @ {fmt(m.endpoint)}", cost=found)
        console.print(to_rich(manifest_table(m)))
    console.print(f"from: {data.directory}", highlight=False)
