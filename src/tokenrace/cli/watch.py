"""`tokenrace watch`: a reference profile repeated on a schedule against an endpoint, each run kept
in the history; `--report` gives the rolling P50 over 72 hours beside a published figure."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console

from tokenrace import aio
from tokenrace.cli.common import Options, echo_json
from tokenrace.cli.options import bench_options, settings_from_options, spec_from_options
from tokenrace.cli.profiles import Defaults, apply_profile, profile_option, run_defaults
from tokenrace.client.providers import PROVIDERS
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.figures.cost import lookup
from tokenrace.load.profiles import Profile
from tokenrace.report.watch import FIGURES, parse_published, watch_html, watch_table
from tokenrace.runs.history import History
from tokenrace.runs.watch import DEFAULT_PER_DAY, Watcher, WatchSpec, WatchStore
from tokenrace.table import to_rich


def watch_defaults(p: Profile) -> Defaults:
    """The profile's run, with its scheduled runs' request count (Artificial Analysis: one prompt)."""
    return {**run_defaults(p), "requests": p.watch_requests, "per_day": p.watch_per_day}


def default_name(o: Options) -> str:
    """profile-model@host: the same flags name the same watch, so a restart finds its schedule."""
    url = o.get("url") or (PROVIDERS[o["provider"]].base_url if o.get("provider") in PROVIDERS else "")
    host = urlsplit(str(url)).netloc or "default"
    raw = f"{o['profile']}-{o.get('model') or 'default'}@{host}"
    return re.sub(r"[^A-Za-z0-9._@-]+", "-", raw)


@click.command("watch")
@bench_options
@profile_option
@click.option("--name", help="The watch's name (default: PROFILE-MODEL@HOST); the schedule is kept under it.")
@click.option(
    "--per-day",
    type=int,
    help=f"Runs a day, each at a random minute [default: the profile's: {DEFAULT_PER_DAY}, "
    "1 for aa-parallel and aa-100k].",
)
@click.option("--max-cost", type=float, help="Spend at most this many dollars over the watch (needs a price).")
@click.option("--once", is_flag=True, help="Run the slot that is due, if any, and exit (for cron).")
@click.option(
    "--report", is_flag=True, help="Print the rolling P50 over 72 hours and write the HTML plot; send nothing."
)
@click.option(
    "--published", help="A published figure to set beside it, e.g. '1705 tok/s, Artificial Analysis, P50 72 h'."
)
@click.option(
    "--figure",
    type=click.Choice(list(FIGURES)),
    help="Which figure --published states [default: output_speed for tok/s, ttft for s or ms].",
)
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="--report: the HTML file.")
@click.pass_context
def command(ctx: click.Context, /, **o: Any) -> None:
    """Repeat a reference profile on a schedule, as Artificial Analysis watches an API: --per-day runs a
    day at random minutes (8 by default), each a run directory in the history.

    The schedule lives in the history, so a watch started again goes on where it was; `--once` runs the
    due slot and exits (run it from cron every few minutes). `--report` prints each figure's rolling
    P50 over 72 hours, beside --published, and writes a plot over time.
    """
    if not o["profile"]:
        raise InvalidInput("profile", "watch repeats a reference profile: give one, e.g. --profile aa")
    chosen = apply_profile(ctx, o, watch_defaults)
    assert chosen is not None
    name = str(o["name"] or default_name(o))
    if o["report"]:
        _report(name, o)
        return
    settings = settings_from_options(o)
    settings.profile = chosen.name
    if settings.endpoint is None:
        raise InvalidInput("url", "watch measures an endpoint: give --url or --provider")
    cost = spec_from_options(o)
    price = (
        cost.price
        if cost is not None and cost.price is not None
        else lookup(settings.endpoint.provider, settings.model)
    )
    spec = WatchSpec(
        name=name,
        profile=chosen.name,
        per_day=int(o["per_day"]),
        seed=int(o["seed"]),
        max_cost_usd=o["max_cost"],
        price=price,
        directory=o["output"] or Path("runs") / f"watch-{name}",
    )
    spec.validate()  # before the history is opened
    notify = (lambda line: None) if o["as_json"] else (lambda line: click.echo(line, err=True))
    with History.open() as history:
        watcher = Watcher(spec, settings, history, notify=notify)
        if o["once"]:
            slot = aio.run(watcher.once())
            if slot is None:
                nxt = watcher.store.next_planned(name, datetime.now(UTC))
                click.echo(f"{name}: nothing due; next run at {nxt.isoformat() if nxt else 'unknown'}")
            else:
                click.echo(f"{name}: {slot.status} {slot.run_path or ''} {slot.note or ''}".rstrip())
        else:
            runs = aio.run(watcher.forever())
            click.echo(f"{name}: {runs} runs")
        if watcher.stopped:
            click.echo(f"{name}: stopped: {watcher.stopped}", err=True)
            sys.exit(1)


def _report(name: str, o: Options) -> None:
    figure = o.get("figure")
    published = parse_published(str(o["published"]), figure) if o.get("published") else None
    with History.open() as history:
        store = WatchStore(history)
        if not store.exists(name):
            raise UsageError(f"no watch named {name!r} in the history (give --name, or the flags it was started with)")
        slots = store.slots(name)
    now = datetime.now(UTC)
    if o["as_json"]:
        echo_json([s.model_dump(mode="json") for s in slots if s.status != "planned"])
        return
    table = watch_table(name, slots, now, published)
    Console().print(to_rich(table))
    for note in table.notes:
        click.echo(note)
    out = o.get("html_file") or Path(o["output"] or Path("runs") / f"watch-{name}") / "watch.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(watch_html(name, slots, now, published), encoding="utf-8")
    click.echo(f"report: {out}")
