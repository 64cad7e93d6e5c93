"""`tokenrace bench --quality-samples N`: after the speed run, a quality pass on the same endpoint.

The pass asks N items of every built-in suite (`tokenrace quality --samples N`) at temperature 0
(or bench's --temperature) with bench's --seed, and writes items.jsonl and quality.json into the
run directory's quality/ subdirectory, where `compare` and `report` find them beside the speed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from tokenrace.cli.quality import print_result
from tokenrace.client.request import GENERATING_APIS
from tokenrace.errors import InvalidInput, UsageError
from tokenrace.model.engine import EngineRecord
from tokenrace.quality.models import QualityResult
from tokenrace.quality.runner import QualitySettings, run_quality
from tokenrace.quality.suites import resolve_suites
from tokenrace.report.quality import QUALITY_SUBDIR
from tokenrace.runs.settings import BenchSettings

OPTION = click.option(
    "--quality-samples",
    type=int,
    help="After the speed run, ask N items of each built-in quality suite on the same endpoint "
    "(temperature 0 unless --temperature, seed --seed) into RUN/quality/; `compare` and `report` "
    "show it beside the speed. See `tokenrace quality`.",
)
# Keys of --extra-body that would change what a quality item asks or how long it may answer: the
# speed run's --ignore-eos, say, would make every answer run to max_tokens past its end.
NOT_FORWARDED = frozenset({"ignore_eos", "max_tokens", "max_completion_tokens", "min_tokens", "n", "stream"})


def check_samples(samples: int | None, api: str = "chat") -> None:
    """Refuse a bad count, or a pass the API cannot answer, before the speed run, not after it."""
    if samples is not None and samples < 1:
        raise UsageError("--quality-samples must be at least 1")
    if samples is not None and api not in GENERATING_APIS:
        raise InvalidInput("quality_samples", f"asks questions and checks the answers; the {api} API answers none")


def quality_settings(settings: BenchSettings, base_url: str, model: str, samples: int) -> QualitySettings:
    endpoint = settings.endpoint
    external = endpoint is not None and endpoint.base_url == base_url
    return QualitySettings(
        base_url=base_url,
        model=model,
        api_key=endpoint.api_key if external and endpoint else None,
        key_source=endpoint.key_source if external and endpoint else None,
        seed=settings.load.seed if settings.load.seed is not None else 0,
        temperature=settings.request.temperature if settings.request.temperature is not None else 0.0,
        api=settings.request.api,
        timeouts=settings.timeouts,
        samples=samples,
        after="bench",
        extra_body={k: v for k, v in settings.request.extra_body.items() if k not in NOT_FORWARDED},
        extra_headers=dict(settings.request.extra_headers),
    )


async def quality_pass(
    settings: BenchSettings,
    base_url: str,
    model: str,
    samples: int,
    run_dir: Path,
    quiet: bool,
    engine: EngineRecord | None = None,
) -> QualityResult:
    items = resolve_suites([], samples, settings.load.seed or 0)
    if not quiet:
        click.echo(f"quality pass: {len(items)} items on the same endpoint...", err=True)
    s = quality_settings(settings, base_url, model, samples)
    return await run_quality(items, s, run_dir / QUALITY_SUBDIR, engine)


def run_pass(settings: BenchSettings, base_url: str, model: str, samples: int, run_dir: Path, quiet: bool) -> Any:
    """The pass as its own event loop, after the speed run's; Ctrl-C keeps the items so far."""
    try:
        return asyncio.run(quality_pass(settings, base_url, model, samples, run_dir, quiet))
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: the quality items answered so far are in {run_dir / QUALITY_SUBDIR}", err=True)
        sys.exit(130)


def print_pass(result: QualityResult, run_dir: Path) -> None:
    print_result(result, Console(width=max(100, Console().width)))
    click.echo(f"quality pass: {run_dir / QUALITY_SUBDIR}")
