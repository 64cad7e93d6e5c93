"""`tokenrace monitor`: sample GPUs, this machine and a server's /metrics, standalone."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import click

from tokenrace.cli.common import echo_json
from tokenrace.errors import UsageError
from tokenrace.model.files import TIMESERIES
from tokenrace.model.monitor import ResourcesFile, TimeseriesLine
from tokenrace.monitor import MonitorSession, is_local_url, resource_warnings
from tokenrace.monitor.render import live_line, summary_lines
from tokenrace.runs.store import default_run_dir, write_model
from tokenrace.units import parse_duration_s

RESOURCES = "resources.json"


@click.command("monitor")
@click.option("--interval", default="1", show_default=True, help="Time between samples (1, 0.5, 2s, 250ms).")
@click.option(
    "--duration", default="60s", show_default=True, help="How long to sample (30s, 5m, 1h); Ctrl-C stops early."
)
@click.option(
    "--metrics-url",
    help="The server's Prometheus endpoint (vLLM, SGLang, llama.cpp --metrics, TGI); a bare http://host:port gets /metrics.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Directory for timeseries.jsonl and resources.json [runs/<time>-monitor].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON, with no live line.")
def command(interval: str, duration: str, metrics_url: str | None, output: Path | None, as_json: bool) -> None:
    """Sample GPU (NVML), CPU, memory, network and the server's /metrics into timeseries.jsonl.

    Prints a live line per sample on stderr and a summary with resource warnings at the end.
    """

    interval_s = parse_duration_s(interval, "--interval")
    duration_s = parse_duration_s(duration, "--duration")
    assert interval_s is not None and duration_s is not None
    url = _metrics_url(metrics_url) if metrics_url else None
    directory = output or default_run_dir("monitor")
    result = asyncio.run(_run(directory, interval_s, duration_s, url, live=not as_json))
    if as_json:
        echo_json(result.model_dump(mode="json"))
        return
    _print_summary(result, directory)


def _metrics_url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--metrics-url must look like http://host:port/metrics, got {text!r}")
    return text.strip() if parts.path.strip("/") else f"{parts.scheme}://{parts.netloc}/metrics"


async def _run(directory: Path, interval_s: float, duration_s: float, url: str | None, live: bool) -> ResourcesFile:
    tty = sys.stderr.isatty()

    def show(sample: TimeseriesLine) -> None:
        line = live_line(sample)
        # On a terminal the line is rewritten in place; in a log, one line per sample.
        click.echo(f"\r{line}\x1b[K" if tty else line, err=True, nl=not tty)

    session = MonitorSession(
        directory, interval_s, url, on_sample=show if live else None, local_server=is_local_url(url) if url else None
    )
    await session.start()
    for notice in session.notices:
        if live:
            click.echo(notice, err=True)
    interrupted = False
    try:
        await asyncio.sleep(duration_s)
        await _last_sample(session, duration_s, interval_s)
    except asyncio.CancelledError:  # Ctrl-C: stop early and still write the summary
        interrupted = True
    finally:
        resources = await session.stop()
    if live and tty:
        click.echo("", err=True)
    result = ResourcesFile(
        **dict(resources),
        metrics_url=url,
        interrupted=interrupted,
        warnings=[w.message for w in resource_warnings(resources)],
    )
    try:
        write_model(directory / RESOURCES, result)
    except OSError as exc:
        click.echo(f"cannot write {directory / RESOURCES}: {exc.strerror}", err=True)
    return result


async def _last_sample(session: MonitorSession, duration_s: float, interval_s: float) -> None:
    """Wait (briefly) for the sample due at exactly `duration`: 5 s at 1 s gives 5 samples, not 4
    or 5 depending on which timer fires first. Up to two seconds (or one interval, if longer, to at
    most five), so that a short interval on a busy machine, whose tick's system reads run late or
    overran into the next tick, still gets its last sample; a prompt sample ends the wait at once."""
    due = int(duration_s / interval_s + 1e-9)
    give_up = time.monotonic() + min(max(interval_s, 2.0), 5.0)
    while session.samples < due and time.monotonic() < give_up:
        await asyncio.sleep(0.01)


def _print_summary(r: ResourcesFile, directory: Path) -> None:
    for line in summary_lines(r):
        click.echo(line)
    for notice in r.notices:
        if "unavailable" not in notice:  # those were said when sampling began
            click.echo(notice)
    for w in r.warnings:
        click.echo(f"warning: {w}")
    click.echo(f"timeseries: {directory / (r.timeseries or TIMESERIES)}")
