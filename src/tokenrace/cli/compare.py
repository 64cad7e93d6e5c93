"""`tokenrace compare A B [...]`: side by side, with bootstrap CIs and loud warnings."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.panel import Panel

from tokenrace.cli.common import wide_console
from tokenrace.cli.options import cost_options, spec_from_options
from tokenrace.cli.quality import print_paired
from tokenrace.errors import InvalidInput
from tokenrace.report.compare import Report, compare, compare_table, cost_rows, to_csv, to_markdown
from tokenrace.report.headline import knee_text
from tokenrace.report.quality import QualitySection, sides_table
from tokenrace.runs.reader import load
from tokenrace.table import to_rich


@click.command("compare")
@click.argument("runs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print Markdown tables.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV, one row per metric.")
@click.option("--strict", is_flag=True, help="Exit 1 when the conditions differ.")
@click.option(
    "--confidence",
    type=float,
    default=0.95,
    show_default=True,
    help="The intervals' confidence (docs/metrics.md, 'Intervals').",
)
@cost_options
def command(
    runs: tuple[str, ...], as_json: bool, as_markdown: bool, as_csv: bool, strict: bool, confidence: float, **o: Any
) -> None:
    """Compare RUN_A with RUN_B (and more): key metrics, B/A with 95 % bootstrap CIs, and a verdict.

    Each RUN is a run or sweep directory, an id or name from `tokenrace runs`, or a vLLM `bench serve`
    result JSON (--save-result --save-detailed), an AIPerf profile_export.jsonl, or an llm-d Benchmark
    Report (llm-d-benchmark, inference-perf, `tokenrace export --format br`; statistics only, so its
    rows have no interval). The first is the
    baseline A. Sweeps are compared step by step (same concurrency, rate or prompt size). Cost rows
    appear with --price or --gpu-hour-cost, or when the price table knows the runs' provider and model.
    A run with a quality pass (quality.json in its directory or its quality/ subdirectory, as
    `bench --quality-samples` writes) adds its accuracy, and the paired verdict when both sides
    answered the same items.
    """
    if not 0.5 < confidence < 1:
        raise InvalidInput("confidence", f"must lie between 0.5 and 1 (e.g. 0.95), got {confidence:g}")
    report = compare([load(r) for r in runs], extra=cost_rows(spec_from_options(o)), confidence=confidence)
    if as_json or as_markdown or as_csv:
        for w in report.warnings:
            click.echo(f"WARNING: {w}", err=True)
        click.echo(echo_text(report, as_json, as_markdown), nl=False)
    else:
        print_report(report, wide_console())
    if strict and report.warnings:
        sys.exit(1)


def echo_text(report: Report, as_json: bool, as_markdown: bool) -> str:
    if as_json:
        return json.dumps(report.json_model().model_dump(mode="json"), indent=2) + "\n"
    return to_markdown(report) + "\n" if as_markdown else to_csv(report)


def print_report(report: Report, console: Console) -> None:
    if report.warnings:
        body = "\n".join(f"• {w}" for w in report.warnings)
        console.print(
            Panel(body, title="[bold]conditions differ: not a like-for-like comparison[/]", border_style="bold red")
        )
    for c in report.comparisons:
        console.print(to_rich(compare_table(c)))
    for q in report.quality:
        print_quality(q, console)
    if report.knees:
        for name, knee in report.knees.items():
            k = "not reached" if not knee else knee_text(knee)
            console.print(f"knee of {name}: {k}", highlight=False)
    console.print(
        "B/A: ratio of B's statistic to A's; CI: 95 % percentile bootstrap over requests (throughput: over time slices); "
        "significant when the CI excludes 1 (error rate: 0 pp).",
        style="dim",
        highlight=False,
    )


def print_quality(q: QualitySection, console: Console) -> None:
    console.print(to_rich(sides_table(q)))
    if q.comparison is not None:
        print_paired(q.comparison, console, warnings=False)  # they are in the panel above
    if q.note:
        console.print(q.note, style="yellow", highlight=False)
