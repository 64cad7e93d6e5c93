"""`tokenrace export RUN --format br --output FILE`: a run in another tool's format (llm-d's Benchmark
Report v0.2.1, which llm-d-benchmark and inference-perf exchange)."""

from __future__ import annotations

from pathlib import Path

import click

from tokenrace.runs.benchmark_report import write_reports
from tokenrace.runs.reader import load


@click.command("export")
@click.argument("run")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["br"]),
    default="br",
    show_default=True,
    help="br: llm-d's Benchmark Report v0.2.1 (llm-d-benchmark, inference-perf).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The file to write: JSON (.json) or YAML (.yaml, .yml) by its extension. A sweep writes one "
    "report per step, FILE's name with -STEP before the extension.",
)
def command(run: str, fmt: str, output: Path) -> None:
    """Write RUN (a run, sweep or profile directory, or an id or name from `tokenrace runs`) in another
    tool's format. A sweep's reports share one experiment id (run.eid), each step its stage number.

    Times are in ms and ms/token; what the run does not know is left out, never written as 0. The
    mapping is in docs/metrics.md. `compare`, `show` and `report` read these files back, and those of
    llm-d-benchmark and inference-perf.
    """
    for path in write_reports(load(run), output):
        click.echo(f"{fmt}: {path}")
