"""`tokenrace calibrate`: how exact this machine's client is, and up to what load."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tokenrace import aio
from tokenrace.cli.common import echo_json
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.calibration import (
    BIAS_LIMIT_MS,
    Calibration,
    CalibrationStep,
    calibrate_with,
    save_calibration,
)
from tokenrace.runs.store import RunStore


@click.command("calibrate")
@click.option("--quick", is_flag=True, help="Two small steps (a few seconds): a check, not a ceiling to trust.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-save", is_flag=True, help="Do not save the result as this machine's calibration.")
def command(quick: bool, as_json: bool, no_save: bool) -> None:
    """Measure this machine's client against the built-in fake server at rising load.

    The fake server runs in a process of its own, alone on the last core, and logs when it wrote each
    byte; the client runs as `bench` runs it, on the other cores. Reports the client's TTFT and ITL bias (its figure minus the server's) and its
    ceiling: the most content chunks/s and streams with every bias under 1 ms at the median. The
    result is saved as calibration.json in the data directory ($TOKENRACE_HOME), and every bench then
    says whether its own load went past that ceiling (`client_bound`).
    """

    def shown(row: CalibrationStep) -> None:
        if not as_json:
            click.echo(_step_line(row), err=True)

    if not as_json:
        click.echo("calibrating: the fake server at rising load (streams x chunk rate)...", err=True)
    with (
        tempfile.TemporaryDirectory(prefix="tokenrace-calibrate-") as tmp,
        spawn_fake_server({}) as server,
        apart_from(server.proc.pid),
    ):
        store = RunStore(Path(tmp), time.perf_counter_ns())
        try:
            cal = aio.run(calibrate_with(server.base_url, server, quick, aio.LOOP, store.append, on_step=shown))
        finally:
            store.close()
    where = None if no_save else save_calibration(cal)
    if as_json:
        echo_json(cal.model_dump(mode="json"))
    else:
        _print(cal, where)


@contextlib.contextmanager
def apart_from(server_pid: int) -> Iterator[None]:
    """The fake server alone on the last core, this client on the others, while calibrating.

    The server stands in for one on another machine: sharing the client's core, it would take the
    time the client needs and the ceiling would be the pair's. Nothing is pinned on one core.
    """
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        yield
        return
    os.sched_setaffinity(server_pid, {cores[-1]})
    os.sched_setaffinity(0, set(cores[:-1]))
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(cores))


def _pct(p: Any) -> str:
    return "—" if p.p50 is None else f"{p.p50:+.3f} / {p.p99:+.3f} ms"


def _step_line(row: CalibrationStep) -> str:
    got = f"{row.chunks_per_s:,.0f}" if row.chunks_per_s is not None else "—"
    cpu = f"{row.client_cpu_pct:.0f} % of a core" if row.client_cpu_pct is not None else "— (not measured)"
    mark = "ok" if row.within_limit else "over"
    return (
        f"  {row.streams:>4} streams, ITL {row.itl_ms:g} ms: {got} chunks/s (asked {row.offered_chunks_per_s:,.0f})  "
        f"TTFT bias p50/p99 {_pct(row.ttft_bias_ms)}  ITL bias {_pct(row.itl_bias_ms)}  "
        f"chunk {_pct(row.chunk_bias_ms)}  client CPU {cpu}  {mark}"
    )


def _print(cal: Calibration, where: Path | None) -> None:
    if cal.ceiling_chunks_per_s is None:
        click.echo(f"ceiling: none: even the first step's bias was over {BIAS_LIMIT_MS:g} ms at the median")
    else:
        click.echo(
            f"ceiling: {cal.ceiling_chunks_per_s:,.0f} content chunks/s over {cal.ceiling_streams} streams "
            f"with every bias under {BIAS_LIMIT_MS:g} ms at the median"
        )
    click.echo(f"TTFT bias p50/p99: {_pct(cal.ttft_bias_ms)}   ITL bias p50/p99: {_pct(cal.itl_bias_ms)}")
    click.echo(f"stopped: {cal.stopped}")
    if cal.quick:
        click.echo("(--quick: a check of the client, not a ceiling to trust; run without it for one)")
    if where is not None:
        click.echo(f"saved: {where}")
