"""`tokenrace show RUN`: reprint a run's, a sweep's or a claim's report from its saved files (never re-measures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from tokenrace.claim.models import ClaimFile, read_claim
from tokenrace.cli.common import echo_json, wide_console
from tokenrace.cli.options import cost_options, spec_from_options
from tokenrace.figures.cost import CostSpec, cost_of
from tokenrace.model.run import ProfileFile, SweepFile
from tokenrace.report.claim import claim_markdown, claim_table, claim_view
from tokenrace.report.tables import (
    manifest_table,
    profile_view,
    run_table,
    summary_view,
    sweep_view,
    with_costs,
)
from tokenrace.runs.history import dir_kind, resolve_run
from tokenrace.runs.reader import load
from tokenrace.runs.run import Run
from tokenrace.table import fmt, to_csv, to_markdown, to_rich


@click.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the saved summary (or sweep.json, claim.json) as JSON.")
@click.option(
    "--markdown", "as_markdown", is_flag=True, help="Print the table (summary, sweep, steps or conditions) as Markdown."
)
@click.option("--csv", "as_csv", is_flag=True, help="Print the table (summary, sweep, steps or conditions) as CSV.")
@cost_options
def command(run: str, as_json: bool, as_markdown: bool, as_csv: bool, **o: Any) -> None:
    """Reprint the report of RUN: a run, sweep, profile or claim directory, an id or name from `tokenrace
    runs`, a vLLM `bench serve` result JSON / AIPerf profile_export.jsonl, or an llm-d Benchmark Report."""
    path = resolve_run(run)
    if dir_kind(path) == "claim":
        show_claim(read_claim(path), path, as_json, as_markdown, as_csv)
        return
    data = load(path)
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
        console.print(sweep_view(priced))
    elif isinstance(data.data, ProfileFile):
        console.print(profile_view(data.data))
    else:
        m = data.manifest
        found = cost_of(data.summary, m.provider, m.model, cost)
        console.print(summary_view(data.summary, title=f"{fmt(m.model)} @ {fmt(m.endpoint)}", cost=found))
        console.print(to_rich(manifest_table(m)))
    console.print(f"from: {data.directory}", highlight=False)


def show_claim(claim: ClaimFile, directory: Path, as_json: bool, as_markdown: bool, as_csv: bool) -> None:
    """A claim: its verdict, the sentence and every condition against the expectations."""
    if as_json:
        echo_json(claim.model_dump(mode="json"))
    elif as_markdown:
        click.echo(claim_markdown(claim), nl=False)
    elif as_csv:
        click.echo(to_csv(claim_table(claim)), nl=False)
    else:
        console = wide_console()
        console.print(claim_view(claim))
        console.print(f"from: {directory}", highlight=False)
