"""`tokenrace report`: one self-contained HTML file (works offline) for a run, a sweep or a comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tokenrace.cli.options import cost_options, spec_from_options
from tokenrace.report.claim import write_claim_report
from tokenrace.report.html import planner_bound, write
from tokenrace.runs.reader import load


@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=Path("report.html"), show_default=True
)
@click.option("--hardware", help="Draw the speed-of-light line from the planner for this device (e.g. H100-SXM, cpu).")
@click.option("--plan-model", help="Model for the planner [default: the run's model file or name].")
@click.option("--devices", type=int, help="Devices for the planner [default: the fewest that fit].")
@cost_options
def command(
    runs: tuple[str, ...], output: Path, hardware: str | None, plan_model: str | None, devices: int | None, **o: Any
) -> None:
    """Write an HTML report of RUN (a run, sweep or claim directory, an id from `tokenrace runs`, or a
    vLLM / AIPerf result file or an llm-d Benchmark Report); with several RUNs, a comparison against the first.

    Latency CDFs, latency and throughput against load with the knee, a per-request timeline, tokens per
    chunk, resource charts when the run has timeseries.jsonl, and the manifest. One file, no network.
    """

    if len(runs) == 1 and (Path(runs[0]) / "claim.json").is_file():
        path = write_claim_report(Path(runs[0]), output)
        click.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, self-contained)")
        return
    sol = planner_bound(hardware, plan_model, devices) if hardware else None
    path = write([load(r) for r in runs], output, spec_from_options(o), sol)
    click.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, self-contained)")
