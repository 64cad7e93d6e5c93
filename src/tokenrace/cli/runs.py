"""`tokenrace runs`: the run history (an SQLite index of run, sweep, profile and claim directories)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson
from rich.table import Table

from tokenrace.cli.common import echo_json
from tokenrace.model.claim import Verdict
from tokenrace.report.claim import VERDICT_WORDS
from tokenrace.report.render import fmt
from tokenrace.report.tables import wide_console
from tokenrace.runs.history import Filters, History


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
    help="Index this run/sweep directory, or every one below it (repeatable). vLLM/AIPerf result files are converted into a run directory first.",
)
@click.option(
    "--import-to",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where converted vLLM/AIPerf runs go (default runs/).",
)
@click.option("--reindex", is_flag=True, help="Re-read every indexed directory and forget those that are gone.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def command(
    imports: tuple[Path, ...], import_to: Path | None, reindex: bool, as_json: bool, limit: int, steps: bool, **f: Any
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
        echo_json(rows)
        return
    wide_console().print(runs_table(rows))
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


def runs_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(header_style="bold")
    claims = any(r["kind"] == "claim" for r in rows)
    columns = ("id", "kind", "started (UTC)", "name", "model", "endpoint", "load", "err %", "TTFT p50", "tok/s", "knee")
    for c in (*columns, *(("verdict",) if claims else ())):
        t.add_column(c, justify="right" if c in ("err %", "TTFT p50", "tok/s") else "left")
    for r in rows:
        t.add_row(
            r["id"],
            r["kind"] if not r["parent_id"] else f"  {r['kind']}",
            (r["started_at"] or "")[:16].replace("T", " "),
            r["label"] or r["name"],
            r["model"] or "—",
            r["endpoint"] or "—",
            _load(r),
            fmt(None if r["error_rate"] is None else r["error_rate"] * 100),
            fmt(r["ttft_p50_ms"]),
            fmt(r["output_tokens_per_s"]),
            _knee(r["knee"]),
            *((_verdict(r["kind"], r["verdict"]),) if claims else ()),
        )
    return t


def _load(r: dict[str, Any]) -> str:
    if r["kind"] == "claim":
        return f"{r['steps']} conditions"
    if r["kind"] != "run":
        return f"{r['steps']} steps"
    if r["rate"] is not None:
        return f"{fmt(r['rate'], 2)} req/s"
    return f"c={int(r['concurrency'])}" if r["concurrency"] is not None else "—"


def _verdict(kind: str, verdict: Verdict | None) -> str:
    return VERDICT_WORDS[verdict] if kind == "claim" else ""


def _knee(text: str | None) -> str:
    if not text:
        return ""
    k = orjson.loads(text)
    return f"{k['step']} ({fmt(k.get('throughput_tokens_per_s'))} tok/s)"
