"""`tokenrace runs`: the run history (an SQLite index of run, sweep, profile and claim directories)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tokenrace.cli.common import echo_json, wide_console
from tokenrace.report.history import runs_table
from tokenrace.runs.history import Filters, History
from tokenrace.table import to_csv, to_markdown, to_rich


@click.command("runs")
@click.option("--endpoint", help="Only runs whose endpoint URL contains this.")
@click.option("--model", help="Only runs whose model name contains this.")
@click.option("--label", help="Only runs whose label contains this.")
@click.option("--kind", type=click.Choice(["run", "sweep", "profile", "claim"]), help="Only this kind.")
@click.option("--since", help="Started on or after this date (2025-01-31) or time (UTC unless it says).")
@click.option("--until", help="Started before the end of this date, or before this time.")
@click.option("--steps", is_flag=True, help="Also list the steps of sweeps and profiles.")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option(
    "--import",
    "imports",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Index this run/sweep directory, or every one below it (repeatable). vLLM/AIPerf result files and llm-d Benchmark Reports are converted into a run directory first.",
)
@click.option(
    "--import-to",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where converted vLLM/AIPerf/Benchmark Report runs go (default runs/).",
)
@click.option("--reindex", is_flag=True, help="Re-read every indexed directory and forget those that are gone.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the table as Markdown.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the table as CSV.")
def command(
    imports: tuple[Path, ...],
    import_to: Path | None,
    reindex: bool,
    as_json: bool,
    as_markdown: bool,
    as_csv: bool,
    limit: int,
    steps: bool,
    **f: Any,
) -> None:
    """List past runs, sweeps, profiles and claims (with their verdict), newest first, from the history index.

    The index lives in $TOKENRACE_HOME (else the platform's data directory). It points at run
    directories and can always be rebuilt from them with --import and --reindex.
    """
    with History.open() as h:
        for path in imports:
            _import(h, path, import_to)
        if reindex:
            updated, removed = h.reindex()
            click.echo(f"reindexed {updated} entries, removed {removed} whose directory is gone", err=True)
        rows = h.list(Filters(limit=limit, steps=steps, **f))
    if as_json:
        echo_json([r.model_dump(mode="json") for r in rows])
        return
    table = runs_table(rows)
    if as_markdown or as_csv:
        click.echo(to_markdown(table) if as_markdown else to_csv(table), nl=False)
    else:
        wide_console().print(to_rich(table))
    click.echo(f"{len(rows)} shown; history: {h.path}", err=True)


def _import(h: History, path: Path, import_to: Path | None) -> None:
    if path.is_file():
        from tokenrace.runs.importers import import_to_dir  # noqa: PLC0415 - import cost: the importers load only for --import

        directory = import_to_dir(path, import_to)
        ids = h.index(directory)
        click.echo(f"converted {path} into {directory}", err=True)
    else:
        ids = h.import_tree(path)
    click.echo(f"indexed {len(ids)} entries from {path}", err=True)
