"""`tokenrace quality`: are the answers right? One endpoint, or two compared item by item."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from tokenrace.cli.common import echo_json
from tokenrace.client.providers import API_KEY_ENV, resolve_endpoint
from tokenrace.client.request import GENERATING_APIS
from tokenrace.errors import UsageError
from tokenrace.model.files import COMPARISON
from tokenrace.model.metrics import THROUGHPUT, TPOT, TTFT
from tokenrace.quality.models import ItemResult, QualityResult
from tokenrace.quality.paired import QualityComparison, compare_dirs, difference_line
from tokenrace.quality.quantize import quantized_copy
from tokenrace.quality.runner import OnItem, QualitySettings
from tokenrace.quality.suites import BUILTIN, DEFAULT_SAMPLES, Item, resolve_suites
from tokenrace.quality.targets import Target, parse_target, run_target
from tokenrace.report.headline import said
from tokenrace.report.quality import (
    comparison_markdown,
    paired_counts_table,
    quality_table,
    speed_quality_table,
    suites_table,
)
from tokenrace.runs.store import default_run_dir, write_json
from tokenrace.serve.embedded import default_model
from tokenrace.table import to_rich

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QualityOptions:
    """The command's options, as click names them."""

    url: str | None
    model: str | None
    model_b: str | None
    api: str
    api_key_env: str | None
    api_key_env_b: str | None
    suites: tuple[str, ...]
    samples: int | None
    seed: int
    temperature: float
    concurrency: int
    output: Path | None
    as_json: bool
    as_markdown: bool


@click.command("quality")
@click.argument("targets", nargs=-1)
@click.option(
    "--compare",
    is_flag=True,
    help="Compare two TARGETS item by item (run directories, URLs or .gguf files); with none, the "
    "embedded model's Q4_1 against a Q2_K copy made here.",
)
@click.option(
    "--url", help="Base URL, e.g. http://localhost:8000/v1 (env OPENAI_BASE_URL). Omit for the embedded model."
)
@click.option("--model", help="Model name; default: the first one the server lists (a .gguf path without --url).")
@click.option("--model-b", help="With --compare: B's model name (default: --model).")
@click.option(
    "--api",
    type=click.Choice(GENERATING_APIS),
    default="chat",
    show_default=True,
    help="The API to ask through: chat, completions, responses (/responses) or messages (Anthropic /messages).",
)
@click.option(
    "--api-key-env",
    help="Variable holding the API key (default OPENAI_API_KEY when set; ANTHROPIC_API_KEY with --api messages).",
)
@click.option("--api-key-env-b", help="With --compare: B's key variable (default: --api-key-env).")
@click.option(
    "--suite",
    "suites",
    multiple=True,
    help=f"Built-in suite ({', '.join(BUILTIN)}), `all` (default), or a JSONL file (repeatable).",
)
@click.option("--samples", type=int, help=f"Items per suite (built-in default {DEFAULT_SAMPLES}; caps a JSONL suite).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated items and the requests.")
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--concurrency", type=int, default=1, show_default=True, help="Requests in flight.")
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    help="Run directory (default runs/<UTC time>-quality); with --compare it holds a/, b/ and comparison.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print quality.json (or the comparison) as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="With --compare: print Markdown tables.")
def command(targets: tuple[str, ...], compare: bool, **o: Any) -> None:
    """Ask verifiable questions and check every answer exactly: accuracy with a Wilson 95 % interval
    per suite, failed requests reported apart. Writes items.jsonl (as items finish) and quality.json.

    With --compare, run (or read) two sides over the same items and report who is right where, the
    exact McNemar p-value, B - A with a 95 % interval and a verdict, their agreement, and speed.
    """
    opts = QualityOptions(**o)
    items = resolve_suites(list(opts.suites), opts.samples, opts.seed)
    if not compare:
        if targets:
            raise UsageError("TARGETS are for --compare; point one run at an endpoint with --url")
        _single(items, opts)
    else:
        _compare(targets, items, opts)


def _settings(o: QualityOptions, url: str, model: str | None, key_env: str | None) -> QualitySettings:
    key, source = _key(key_env, o.api)
    return QualitySettings(
        base_url=url,
        model=model,
        api_key=key,
        key_source=source,
        seed=o.seed,
        temperature=o.temperature,
        concurrency=o.concurrency,
        api=o.api,
        samples=o.samples,
    )


def _key(key_env: str | None, api: str = "chat") -> tuple[str | None, str | None]:
    if key_env:
        value = os.environ.get(key_env)
        if not value:
            raise UsageError(f"--api-key-env {key_env}: the variable is not set")
        return value, key_env
    # The API's own variable (messages: ANTHROPIC_API_KEY, never an OpenAI key), else OPENAI_API_KEY.
    default = API_KEY_ENV.get(api, "OPENAI_API_KEY")
    if os.environ.get(default):
        return os.environ[default], default
    return None, None


def _default_dir(name: str) -> Path:
    return default_run_dir(name)


def _single(items: list[Item], o: QualityOptions) -> None:
    endpoint = resolve_endpoint(o.url, None, None)
    if endpoint is None:
        model = o.model if o.model and str(o.model).endswith(".gguf") else None
        target = parse_target(str(model or default_model()))
        click.echo(f"starting the embedded model (llama-server, {target.label})...", err=True)
    else:
        target = Target("endpoint", endpoint.base_url, endpoint.base_url)
    out = o.output or _default_dir("quality")
    settings = _settings(o, target.value, o.model if target.kind == "endpoint" else None, o.api_key_env)
    result = _run(run_target(target, items, settings, out, _progress(len(items), o.as_json)), out)
    if o.as_json:
        echo_json(result.model_dump(mode="json"))
    else:
        print_result(result, Console(width=max(100, Console().width)))
        click.echo(f"run directory: {out}")


def _compare(targets: tuple[str, ...], items: list[Item], o: QualityOptions) -> None:
    if not targets:
        if o.url:
            raise UsageError("--compare with --url: name both sides as TARGETS (two URLs or run directories)")
        sides = _embedded_pair()
    elif len(targets) == 2:
        sides = [parse_target(t) for t in targets]
    else:
        raise UsageError(f"--compare takes two TARGETS (or none for the embedded demonstration), got {len(targets)}")
    needs_run = any(t.kind != "run" for t in sides)
    parent = o.output or (_default_dir("quality-compare") if needs_run else None)
    dirs: list[Path] = []
    for side, sub, model, key_env in (
        (sides[0], "a", o.model, o.api_key_env),
        (sides[1], "b", o.model_b or o.model, o.api_key_env_b or o.api_key_env),
    ):
        if side.kind == "run":
            dirs.append(Path(side.value))
            continue
        assert parent is not None
        out = Path(parent) / sub
        settings = _settings(o, side.value, model if side.kind == "endpoint" else None, key_env)
        if side.kind == "gguf":
            click.echo(f"{sub.upper()}: starting the embedded engine on {side.label} ({side.value})...", err=True)
        _run(run_target(side, items, settings, out, _progress(len(items), o.as_json or o.as_markdown)), out)
        dirs.append(out)
    report = compare_dirs(dirs[0], dirs[1], (sides[0].label, sides[1].label))
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
        write_json(Path(parent) / COMPARISON, report.model_dump(mode="json"))
    if o.as_json:
        echo_json(report.model_dump(mode="json"))
    elif o.as_markdown:
        click.echo(comparison_markdown(report), nl=False)
    else:
        print_comparison(report, Console(width=max(100, Console().width)))
    if parent is not None and not o.as_json:
        click.echo(f"comparison: {Path(parent) / COMPARISON}", err=True)


def _embedded_pair() -> list[Target]:
    base = default_model()
    click.echo("making (or reusing) a Q2_K copy of the embedded model with llama-quantize...", err=True)
    return [parse_target(str(base)), parse_target(str(quantized_copy(base, "Q2_K")))]


def _run(coro: Coroutine[Any, Any, T], out: Path) -> T:
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: the items answered so far are saved in {out}", err=True)
        sys.exit(130)


def _progress(total: int, quiet: bool) -> OnItem | None:
    if quiet or not sys.stderr.isatty():
        return None
    counts = {"right": 0, "wrong": 0, "error": 0}

    def on_item(r: ItemResult) -> None:
        counts[r.verdict] += 1
        done = sum(counts.values())
        click.echo(
            f"\r  {done}/{total} answered: {counts['right']} right, {counts['wrong']} wrong, {counts['error']} failed",
            err=True,
            nl=done == total,
        )

    return on_item


def print_result(r: QualityResult, console: Console) -> None:
    console.print(to_rich(quality_table(r, f"quality of {r.model} @ {r.endpoint}")))
    sp = r.speed
    console.print(
        f"speed over {sp.requests} requests: {TTFT.label('p50')} {said(TTFT, sp.ttft_ms_p50)}, "
        f"{TPOT.label('p50')} {said(TPOT, sp.tpot_ms_p50)}, {said(THROUGHPUT, sp.output_tokens_per_s)}",
        highlight=False,
    )
    if r.overall.errors:
        kinds = ", ".join(f"{k} {v}" for k, v in r.overall.errors_by_kind.items())
        console.print(f"failed requests (not counted as wrong): {kinds}", style="yellow", highlight=False)
    if r.interrupted:
        console.print("interrupted: the figures cover the items answered before the stop", style="yellow")


def print_comparison(c: QualityComparison, console: Console) -> None:
    console.print(to_rich(speed_quality_table(c)))
    print_paired(c, console)


def print_paired(c: QualityComparison, console: Console, warnings: bool = True) -> None:
    """Who is right where, B - A with its interval and verdict, per suite, and the agreement."""
    console.print(f"paired over {c.paired.n} items:", highlight=False)
    console.print(to_rich(paired_counts_table(c)))
    style = "red" if c.verdict == "B worse" else "green" if c.verdict == "B better" else None
    console.print(difference_line(c), style=style, highlight=False)
    console.print(to_rich(suites_table(c)))
    ag = c.agreement
    if ag.exact_match_rate is not None and ag.token_similarity is not None:
        console.print(
            f"agreement over {ag.n} pairs: exact match {ag.exact_match_rate * 100:.1f} %, "
            f"token similarity {ag.token_similarity * 100:.1f} %",
            highlight=False,
        )
    for w in c.warnings if warnings else []:
        console.print(f"WARNING: {w}", style="bold red", highlight=False)
    console.print(f"CI of B - A: {c.difference.method}; verdict from the CI.", style="dim", highlight=False)
